package metrics

// PodLabels names the labels that carry a pod's namespace and name on the application's own
// series, which the built-in checks of the routers without a data plane of their own read as
// {{ namespace_label }} and {{ pod_label }}. Prometheus's pod discovery offers them as
// __meta_kubernetes_namespace and __meta_kubernetes_pod_name, and each installation relabels
// them its own way.
type PodLabels struct {
	Namespace, Pod string
}

// The labellings the built-in checks know.
var (
	// FlaggerPodLabels are Flagger's (and its guides' relabelling): the default.
	FlaggerPodLabels = PodLabels{Namespace: "kubernetes_namespace", Pod: "kubernetes_pod_name"}
	// ChartPodLabels are what kube-prometheus-stack's and prometheus-community/prometheus's
	// default pod scraping writes.
	ChartPodLabels = PodLabels{Namespace: "namespace", Pod: "pod"}
)

// IsZero says that no labelling is set.
func (p PodLabels) IsZero() bool { return p == PodLabels{} }

func (p PodLabels) String() string { return p.Namespace + " and " + p.Pod }

// orDefault is p, or Flagger's labels when p is unset.
func (p PodLabels) orDefault() PodLabels {
	if p.Namespace == "" || p.Pod == "" {
		return FlaggerPodLabels
	}
	return p
}

// ReadsPodLabels says whether a query template names {{ namespace_label }} or {{ pod_label }},
// so that which labelling the series carry matters to it: rendered under two labellings, such a
// query reads differently.
func ReadsPodLabels(query string, v Vars) bool {
	v.PodLabels = FlaggerPodLabels
	flagger, err1 := Render(query, v)
	v.PodLabels = ChartPodLabels
	chart, err2 := Render(query, v)
	return err1 == nil && err2 == nil && flagger != chart
}
