// Package provider is the Terraform glue: the provider configuration and the canary_release
// resource. The rollout itself lives in package rollout.
package provider

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net/http"
	"os"
	"slices"
	"strings"

	"github.com/hashicorp/terraform-plugin-framework-validators/stringvalidator"
	"github.com/hashicorp/terraform-plugin-framework/datasource"
	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/provider"
	"github.com/hashicorp/terraform-plugin-framework/provider/schema"
	"github.com/hashicorp/terraform-plugin-framework/resource"
	"github.com/hashicorp/terraform-plugin-framework/schema/validator"
	"github.com/hashicorp/terraform-plugin-framework/types"
	"github.com/hashicorp/terraform-plugin-go/tftypes"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	// Credential plugins (exec, OIDC) for kubeconfigs that use them.
	_ "k8s.io/client-go/plugin/pkg/client/auth"
	"k8s.io/client-go/rest"

	"github.com/canary-release/terraform-provider-canary/internal/configs"
	"github.com/canary-release/terraform-provider-canary/internal/kube"
	"github.com/canary-release/terraform-provider-canary/internal/lock"
	"github.com/canary-release/terraform-provider-canary/internal/metrics"
	"github.com/canary-release/terraform-provider-canary/internal/metrics/backend"
	"github.com/canary-release/terraform-provider-canary/internal/metrics/prometheus"
	"github.com/canary-release/terraform-provider-canary/internal/pushmetrics"
)

// Defaults sized for many releases in one apply: client-go's own (QPS 5, Burst 10) would
// make a refresh of a few hundred releases take minutes. The burst is kubectl's: an apply of
// hundreds of releases starts them all at once, each with a few reads and writes.
const (
	defaultQPS   = 100
	defaultBurst = 300
)

var _ provider.Provider = &CanaryProvider{}

// CanaryProvider is the `canary` provider.
type CanaryProvider struct {
	version string
}

// CanaryProviderModel is the provider block.
type CanaryProviderModel struct {
	Kubernetes *KubernetesModel         `tfsdk:"kubernetes"`
	Prometheus *ProviderPrometheusModel `tfsdk:"prometheus"`
	// MetricTemplates are Flagger's MetricTemplates, by name.
	MetricTemplates map[string]types.Object `tfsdk:"metric_templates"`
	// TerminalProgress prints the progress lines to Terraform's terminal.
	TerminalProgress types.Bool `tfsdk:"terminal_progress"`
	// IncludeLabelPrefix is Flagger's -include-label-prefix, for every release.
	IncludeLabelPrefix types.List `tfsdk:"include_label_prefix"`
	// Pushgateway receives each run's series (pushgateway.go).
	Pushgateway *PushgatewayModel `tfsdk:"pushgateway"`
}

// KubernetesModel mirrors the helm provider's kubernetes block.
type KubernetesModel struct {
	ConfigPath            types.String  `tfsdk:"config_path"`
	ConfigPaths           []string      `tfsdk:"config_paths"`
	ConfigContext         types.String  `tfsdk:"config_context"`
	ConfigContextAuthInfo types.String  `tfsdk:"config_context_auth_info"`
	ConfigContextCluster  types.String  `tfsdk:"config_context_cluster"`
	Host                  types.String  `tfsdk:"host"`
	Username              types.String  `tfsdk:"username"`
	Password              types.String  `tfsdk:"password"`
	Token                 types.String  `tfsdk:"token"`
	ClusterCACertificate  types.String  `tfsdk:"cluster_ca_certificate"`
	ClientCertificate     types.String  `tfsdk:"client_certificate"`
	ClientKey             types.String  `tfsdk:"client_key"`
	TLSServerName         types.String  `tfsdk:"tls_server_name"`
	ProxyURL              types.String  `tfsdk:"proxy_url"`
	Insecure              types.Bool    `tfsdk:"insecure"`
	Exec                  *ExecModel    `tfsdk:"exec"`
	QPS                   types.Float64 `tfsdk:"qps"`
	Burst                 types.Int64   `tfsdk:"burst"`
}

// ExecModel is a client-go credential plugin.
type ExecModel struct {
	APIVersion types.String      `tfsdk:"api_version"`
	Command    types.String      `tfsdk:"command"`
	Args       []string          `tfsdk:"args"`
	Env        map[string]string `tfsdk:"env"`
}

// clients is what the resource gets from the provider.
type clients struct {
	rest *rest.Config
	kube kubernetes.Interface
	// leases is kube with a client-side rate limiter of its own, for the release locks.
	leases kubernetes.Interface
	// lockMachine is the machine the release locks name and check holders on; nil is this
	// one. The fault campaign simulates hosts, containers and reused pids.
	lockMachine lock.Machine
	dynamic     dynamic.Interface
	metrics     *metrics.Client
	// podLabels is prometheus.namespace_label and pod_label (unset: each run finds them).
	podLabels metrics.PodLabels
	// templates are the provider's metric_templates, by name.
	templates map[string]metricTemplate
	// includeLabelPrefix is the provider's include_label_prefix; nil when unset.
	includeLabelPrefix []string
	// http calls webhooks; cluster Service URLs go through the API server.
	http *http.Client
	// insecureHTTP calls the webhooks with disable_tls: what it reaches directly, it reaches
	// without verifying the certificate.
	insecureHTTP *http.Client
	// secrets are the configured credentials, masked in every log line the resource writes.
	secrets []string
	// terminalProgress prints the runs' progress lines to Terraform's terminal, if it has one.
	terminalProgress bool
	// push is where runs push their series; nil when no pushgateway is set.
	push *pushmetrics.Config
	// unknownSettings names the provider settings not known until apply (a cluster created in
	// the same configuration). When it is set, no other field is: the settings that are known
	// would combine with fallbacks (KUBE_* variables, in-cluster credentials)
	// into another cluster's, so nothing reads or writes until Terraform configures the
	// provider again with the final values.
	unknownSettings []string
}

// planReadsDeferred reports whether the provider's settings are not known yet, and then warns
// once that this plan or refresh does not read the cluster. Callers return when it is true.
func (c *clients) planReadsDeferred(diags *diag.Diagnostics) bool {
	if c == nil || len(c.unknownSettings) == 0 {
		return false
	}
	diags.AddWarning("Provider configuration not yet known",
		fmt.Sprintf("The canary provider's %s %s not known until apply (for example, a cluster created in this same configuration). "+
			"Plan-time reads of the cluster are skipped, so this plan shows no drift of the live objects; nothing is read from another "+
			"cluster (KUBE_* variables or in-cluster credentials) in their place. The apply uses the known values.",
			c.unknownSettingsText(), isOrAre(len(c.unknownSettings))))
	return true
}

// Remedies that refuseUnknownConfig gives.
const (
	// An apply configures the provider again with the final values first, so an apply that
	// still sees unknown settings is a bug somewhere, never a reason to guess a cluster.
	remedyReportBug = "Terraform configures the provider again with the known values before it applies, so this should not happen; please report it."
	remedyDependsOn = "Add depends_on with the resource that creates the cluster (or the canary_release) to this data source: " +
		"Terraform then reads it during apply, once the provider's settings are known."
	remedyImportLater = "Import it once the provider's settings are known, after the apply that creates the cluster."
)

// refuseUnknownConfig reports whether the provider's settings are not known yet, and then
// fails the operation, which cannot be skipped the way a plan-time read is.
func (c *clients) refuseUnknownConfig(operation, remedy string, diags *diag.Diagnostics) bool {
	if c == nil || len(c.unknownSettings) == 0 {
		return false
	}
	diags.AddError("Provider configuration not known",
		fmt.Sprintf("%s needs the cluster, but the canary provider's %s %s not known yet. Nothing is read from or written to another "+
			"cluster (KUBE_* variables or in-cluster credentials) in their place. %s",
			operation, c.unknownSettingsText(), isOrAre(len(c.unknownSettings)), remedy))
	return true
}

func (c *clients) unknownSettingsText() string {
	return strings.Join(c.unknownSettings, ", ")
}

func isOrAre(n int) string {
	if n == 1 {
		return "is"
	}
	return "are"
}

// unknownSettings names the values of the provider configuration that are unknown, an unknown
// block by itself rather than by each of its attributes, e.g. `kubernetes.host`, `kubernetes`
// or `metric_templates["errors"].prometheus.address`.
func unknownSettings(config tftypes.Value) []string {
	var names []string
	_ = tftypes.Walk(config, func(at *tftypes.AttributePath, v tftypes.Value) (bool, error) {
		if v.IsKnown() {
			return true, nil
		}
		names = append(names, settingName(at))
		return false, nil
	})
	slices.Sort(names)
	return names
}

// settingName spells a path the way the provider block is written.
func settingName(at *tftypes.AttributePath) string {
	var b strings.Builder
	for _, step := range at.Steps() {
		switch step := step.(type) {
		case tftypes.AttributeName:
			if b.Len() > 0 {
				b.WriteByte('.')
			}
			b.WriteString(string(step))
		case tftypes.ElementKeyString:
			fmt.Fprintf(&b, "[%q]", string(step))
		case tftypes.ElementKeyInt:
			fmt.Fprintf(&b, "[%d]", int64(step))
		default:
			b.WriteString("[…]")
		}
	}
	if b.Len() == 0 {
		return "configuration"
	}
	return b.String()
}

// New returns the provider factory.
func New(version string) func() provider.Provider {
	return func() provider.Provider { return &CanaryProvider{version: version} }
}

func (p *CanaryProvider) Metadata(_ context.Context, _ provider.MetadataRequest, resp *provider.MetadataResponse) {
	resp.TypeName = "canary"
	resp.Version = p.version
}

func (p *CanaryProvider) Schema(_ context.Context, _ provider.SchemaRequest, resp *provider.SchemaResponse) {
	str := func(desc string, sensitive bool) schema.StringAttribute {
		return schema.StringAttribute{Optional: true, Sensitive: sensitive, MarkdownDescription: desc}
	}
	resp.Schema = schema.Schema{
		MarkdownDescription: "The `canary` provider runs Flagger-style progressive delivery during `terraform apply`: " +
			"traffic moves step by step from the stable copy of a workload to the new version through the cluster's " +
			"service mesh or gateway, Prometheus is checked at every step, and the release is promoted or rolled back. " +
			"The apply's exit code is the verdict.",
		Attributes: map[string]schema.Attribute{
			"kubernetes": schema.SingleNestedAttribute{
				Optional: true,
				MarkdownDescription: "How to reach the cluster, with the kubernetes provider's attribute names and variables. Each " +
					"attribute falls back to its `KUBE_*` variable. As in the kubernetes and helm providers, no kubeconfig is read " +
					"unless one is named (`config_path`, `config_paths` or their variables): neither `KUBECONFIG` nor " +
					"`~/.kube/config`, which would be whatever cluster the last `kubectl` command pointed at. With nothing set, " +
					"the in-cluster service account is used, and every plan warns, naming the cluster.",
				Attributes: map[string]schema.Attribute{
					"config_path": schema.StringAttribute{Optional: true,
						MarkdownDescription: "Path to a kubeconfig file. Falls back to `KUBE_CONFIG_PATH`.",
						Validators:          []validator.String{stringvalidator.ConflictsWith(path.MatchRoot("kubernetes").AtName("config_paths"))}},
					"config_paths": schema.ListAttribute{Optional: true, ElementType: types.StringType,
						MarkdownDescription: "Paths to kubeconfig files, merged as `kubectl` merges `KUBECONFIG`'s list. Falls back to `KUBE_CONFIG_PATHS` " +
							"(a list separated by `:`, `;` on Windows)."},
					"config_context":           str("Context of the kubeconfig to use. Falls back to `KUBE_CTX`. Required when the kubeconfig has several contexts: the current context is never taken implicitly.", false),
					"config_context_auth_info": str("User of the kubeconfig to use, instead of the context's. Falls back to `KUBE_CTX_AUTH_INFO`.", false),
					"config_context_cluster":   str("Cluster of the kubeconfig to use, instead of the context's. Falls back to `KUBE_CTX_CLUSTER`.", false),
					"host":                     str("API server address, e.g. `https://10.0.0.1:6443`. Falls back to `KUBE_HOST`.", false),
					"username":                 str("Username for HTTP basic authentication. Falls back to `KUBE_USER`.", false),
					"password":                 str("Password for HTTP basic authentication. Falls back to `KUBE_PASSWORD`.", true),
					"token":                    str("Bearer token. Falls back to `KUBE_TOKEN`.", true),
					"cluster_ca_certificate":   str("PEM-encoded CA certificate of the API server. Falls back to `KUBE_CLUSTER_CA_CERT_DATA`.", false),
					"client_certificate":       str("PEM-encoded client certificate. Falls back to `KUBE_CLIENT_CERT_DATA`.", false),
					"client_key":               str("PEM-encoded client key. Falls back to `KUBE_CLIENT_KEY_DATA`.", true),
					"tls_server_name":          str("Server name to verify the API server's certificate against, when it differs from `host`'s. Falls back to `KUBE_TLS_SERVER_NAME`.", false),
					"proxy_url":                str("URL of the proxy to reach the API server through, e.g. `http://proxy.example:3128`. Falls back to `KUBE_PROXY_URL`.", false),
					"insecure": schema.BoolAttribute{Optional: true,
						MarkdownDescription: "Skip TLS verification of the API server. Off unless set (or `KUBE_INSECURE=true`)."},
					"exec": schema.SingleNestedAttribute{
						Optional:            true,
						MarkdownDescription: "A credential plugin, as in a kubeconfig's `exec` section.",
						Attributes: map[string]schema.Attribute{
							"api_version": schema.StringAttribute{Required: true, MarkdownDescription: "API version of the plugin's output, e.g. `client.authentication.k8s.io/v1`."},
							"command":     schema.StringAttribute{Required: true, MarkdownDescription: "Command to run."},
							"args":        schema.ListAttribute{Optional: true, ElementType: types.StringType, MarkdownDescription: "Arguments of the command."},
							"env":         schema.MapAttribute{Optional: true, ElementType: types.StringType, MarkdownDescription: "Extra environment variables of the command."},
						},
					},
					"qps": schema.Float64Attribute{Optional: true,
						MarkdownDescription: "Requests per second the provider may send to the API server. Default 100, sized for many releases in one apply."},
					"burst": schema.Int64Attribute{Optional: true,
						MarkdownDescription: "Burst of requests above `qps`. Default 300."},
				},
			},
			"prometheus": schema.SingleNestedAttribute{
				Optional: true,
				MarkdownDescription: "The Prometheus server the analysis queries. An address that names a cluster Service " +
					"(`http://prometheus.monitoring:9090`, `…svc`, `…svc.cluster.local`) is reached through the API server's service proxy.",
				Attributes: providerPrometheusAttributes(),
			},
			"metric_templates": metricTemplatesAttribute(),
			"terminal_progress": schema.BoolAttribute{Optional: true,
				MarkdownDescription: "Print each step of a release (the weight, each metric's value against its range, the gates, the verdict) " +
					"to the terminal `terraform apply` runs in, as it happens, without `TF_LOG`. Nothing is printed where there is no terminal " +
					"(CI, HCP Terraform). Default `true`, or `CANARY_TERMINAL_PROGRESS` (`false` turns it off). " +
					"See the [troubleshooting guide](guides/troubleshooting.md#watching-a-release-live).",
			},
			"include_label_prefix": schema.ListAttribute{Optional: true, ElementType: types.StringType,
				MarkdownDescription: includeLabelPrefixDescription + " A release's own `include_label_prefix` replaces this list."},
			"pushgateway": pushgatewayAttribute(),
		},
	}
}

func (p *CanaryProvider) Configure(ctx context.Context, req provider.ConfigureRequest, resp *provider.ConfigureResponse) {
	// Checked before decoding: an unknown value would decode as "" (or fail to decode, for a
	// block), and an empty setting falls back to another cluster's configuration.
	if unknown := unknownSettings(req.Config.Raw); len(unknown) > 0 {
		c := &clients{unknownSettings: unknown}
		resp.ResourceData = c
		resp.DataSourceData = c
		if req.ClientCapabilities.DeferralAllowed {
			// A Terraform with deferred actions plans these resources again once the values are known.
			resp.Deferred = &provider.Deferred{Reason: provider.DeferredReasonProviderConfigUnknown}
		}
		return
	}
	var cfg CanaryProviderModel
	resp.Diagnostics.Append(req.Config.Get(ctx, &cfg)...)
	if resp.Diagnostics.HasError() {
		return
	}

	kc := kube.Config{QPS: defaultQPS, Burst: defaultBurst}
	if k := cfg.Kubernetes; k != nil {
		kc.ConfigPath = k.ConfigPath.ValueString()
		kc.ConfigPaths = k.ConfigPaths
		kc.ConfigContext = k.ConfigContext.ValueString()
		kc.ConfigContextAuthInfo = k.ConfigContextAuthInfo.ValueString()
		kc.ConfigContextCluster = k.ConfigContextCluster.ValueString()
		kc.Host = k.Host.ValueString()
		kc.Username = k.Username.ValueString()
		kc.Password = k.Password.ValueString()
		kc.TLSServerName = k.TLSServerName.ValueString()
		kc.ProxyURL = k.ProxyURL.ValueString()
		kc.Token = k.Token.ValueString()
		kc.ClusterCACertificate = k.ClusterCACertificate.ValueString()
		kc.ClientCertificate = k.ClientCertificate.ValueString()
		kc.ClientKey = k.ClientKey.ValueString()
		kc.Insecure = k.Insecure.ValueBool()
		if k.Exec != nil {
			kc.Exec = &kube.Exec{APIVersion: k.Exec.APIVersion.ValueString(), Command: k.Exec.Command.ValueString(), Args: k.Exec.Args, Env: k.Exec.Env}
		}
		if !k.QPS.IsNull() {
			kc.QPS = float32(k.QPS.ValueFloat64())
		}
		if !k.Burst.IsNull() {
			kc.Burst = int(k.Burst.ValueInt64())
		}
	}
	restCfg, inCluster, err := kc.Resolve()
	if err != nil {
		resp.Diagnostics.AddAttributeError(path.Root("kubernetes"), "Invalid Kubernetes configuration", err.Error())
		return
	}
	if inCluster {
		resp.Diagnostics.AddWarning("Kubernetes cluster chosen implicitly",
			fmt.Sprintf("No kubernetes setting is configured, so the canary provider uses this machine's in-cluster service account, "+
				"on the API server %s. Set kubernetes.host or kubernetes.config_path (or KUBE_HOST, KUBE_CONFIG_PATH) to choose the cluster explicitly.", restCfg.Host))
	}
	restCfg.Wrap(func(next http.RoundTripper) http.RoundTripper { return loggingTransport{next: next} })
	c := &clients{rest: restCfg}
	var progressSetting *bool
	if !cfg.TerminalProgress.IsNull() {
		v := cfg.TerminalProgress.ValueBool()
		progressSetting = &v
	}
	if c.terminalProgress, err = terminalProgress(progressSetting); err != nil {
		resp.Diagnostics.AddError("Invalid "+envTerminalProgress, err.Error())
		return
	}
	if c.kube, err = kubernetes.NewForConfig(restCfg); err == nil {
		c.dynamic, err = dynamic.NewForConfig(restCfg)
	}
	if err == nil {
		// The Leases get a client-side rate limiter of their own: with many releases in one
		// apply, a renewal queued behind the runs' other requests could miss its deadline, and
		// a lost lease stops the run.
		leaseCfg := rest.CopyConfig(restCfg)
		leaseCfg.RateLimiter = nil
		c.leases, err = kubernetes.NewForConfig(leaseCfg)
	}
	if err != nil {
		resp.Diagnostics.AddAttributeError(path.Root("kubernetes"), "Invalid Kubernetes configuration", err.Error())
		return
	}
	c.http, c.insecureHTTP, err = webhookClients(restCfg)
	if err != nil {
		resp.Diagnostics.AddAttributeError(path.Root("kubernetes"), "Invalid Kubernetes configuration", err.Error())
		return
	}

	var pm *prometheus.Model
	if cfg.Prometheus != nil {
		pm = &cfg.Prometheus.Model
		c.podLabels = cfg.Prometheus.podLabels()
	}
	mc, diags := prometheus.Configure(pm,
		metrics.Config{Address: os.Getenv("CANARY_PROMETHEUS_ADDRESS"), Timeout: prometheus.DefaultTimeout}, path.Root("prometheus"))
	resp.Diagnostics.Append(diags...)
	if resp.Diagnostics.HasError() {
		return
	}
	if mc.Address != "" {
		if c.metrics, err = metrics.NewClient(mc, restCfg); err != nil {
			resp.Diagnostics.AddAttributeError(path.Root("prometheus"), "Invalid Prometheus configuration", err.Error())
			return
		}
	}
	// The resolved values: a KUBE_* variable or a kubeconfig may have supplied them.
	for _, s := range []string{restCfg.BearerToken, string(restCfg.KeyData), restCfg.Password} {
		if s != "" {
			c.secrets = append(c.secrets, s)
		}
	}
	c.secrets = append(c.secrets, prometheus.Secrets(mc)...)
	var pushSecrets []string
	c.push, pushSecrets, diags = pushgatewayConfig(cfg.Pushgateway)
	resp.Diagnostics.Append(diags...)
	c.secrets = append(c.secrets, pushSecrets...)
	var templateSecrets []string
	c.templates, templateSecrets, diags = buildMetricTemplates(ctx, cfg.MetricTemplates, backend.Env{PrometheusAddress: mc.Address, Kube: restCfg})
	c.secrets = append(c.secrets, templateSecrets...)
	resp.Diagnostics.Append(diags...)
	if resp.Diagnostics.HasError() {
		return
	}
	if !cfg.IncludeLabelPrefix.IsNull() {
		c.includeLabelPrefix = stringsOf(cfg.IncludeLabelPrefix)
	}
	resp.ResourceData = c
	resp.DataSourceData = c
}

// includeLabelPrefixDescription describes include_label_prefix, of the provider and of a release.
const includeLabelPrefixDescription = "Prefixes of the keys of the target Deployment's labels and annotations that are copied to the primary Deployment " +
	"and its pod template, as Flagger's `-include-label-prefix` (which Flagger applies to annotations too): `\"*\"` copies every key, `[]` none. " +
	"Default `[\"app.kubernetes.io\"]`, Flagger's documented setting. A key the pod template sets itself keeps the template's value; " +
	"the release's own keys (`app.kubernetes.io/managed-by`, `canary-release.dev/…`), the selector label, Flux's `toolkit.fluxcd.io` keys, " +
	"`kubectl.kubernetes.io/last-applied-configuration` and `deployment.kubernetes.io/…` are never copied. " +
	"The copied keys are not part of the revision: changing one starts no analysis, and the primary takes it the next time the release is applied " +
	"(a change of its configuration, its `triggers` or the target's revision; on the pod template, that rolls the primary's pods " +
	"the way `kubectl rollout restart` does, never below its Ready replicas)."

// labelPrefixes is the include_label_prefix that applies to a release: its own, else the
// provider's, else Flagger's default.
func (c *clients) labelPrefixes(m ReleaseModel) []string {
	if !m.IncludeLabelPrefix.IsNull() && !m.IncludeLabelPrefix.IsUnknown() {
		return stringsOf(m.IncludeLabelPrefix)
	}
	if c != nil && c.includeLabelPrefix != nil {
		return c.includeLabelPrefix
	}
	return configs.DefaultIncludeLabelPrefix
}

// stringsOf is a known list of strings as a slice, empty (not nil) for an empty list.
func stringsOf(l types.List) []string {
	out := []string{}
	for _, v := range l.Elements() {
		if s, ok := v.(types.String); ok && !s.IsNull() && !s.IsUnknown() {
			out = append(out, s.ValueString())
		}
	}
	return out
}

func (p *CanaryProvider) Resources(_ context.Context) []func() resource.Resource {
	return []func() resource.Resource{NewReleaseResource}
}

func (p *CanaryProvider) DataSources(_ context.Context) []func() datasource.DataSource {
	return []func() datasource.DataSource{NewReleaseDataSource}
}

// webhookClients builds the webhooks' HTTP clients: cluster Service URLs go through the API
// server's service proxy, others directly; the second client skips TLS verification on
// direct calls (disable_tls).
func webhookClients(restCfg *rest.Config) (verified, insecure *http.Client, err error) {
	base, ok := http.DefaultTransport.(*http.Transport)
	if !ok {
		return nil, nil, errors.New("http.DefaultTransport was replaced by a non-*http.Transport")
	}
	unverified := base.Clone()
	unverified.TLSClientConfig = &tls.Config{InsecureSkipVerify: true} //nolint:gosec // disable_tls asks for it
	clients := make([]*http.Client, 0, 2)
	for _, direct := range []http.RoundTripper{base, unverified} {
		transport, err := kube.NewServiceProxyTransport(restCfg, direct)
		if err != nil {
			return nil, nil, err
		}
		clients = append(clients, &http.Client{Transport: transport})
	}
	return clients[0], clients[1], nil
}
