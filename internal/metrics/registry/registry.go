// Package registry lists the metric backends a metric template can query, by type name
// (Flagger's provider type). A new backend is its package under internal/metrics and its
// line here; the provider names none.
package registry

import (
	"maps"
	"slices"

	"github.com/canary-release/terraform-provider-canary/internal/metrics/backend"
	"github.com/canary-release/terraform-provider-canary/internal/metrics/cloudwatch"
	"github.com/canary-release/terraform-provider-canary/internal/metrics/datadog"
	"github.com/canary-release/terraform-provider-canary/internal/metrics/dynatrace"
	"github.com/canary-release/terraform-provider-canary/internal/metrics/graphite"
	"github.com/canary-release/terraform-provider-canary/internal/metrics/influxdb"
	"github.com/canary-release/terraform-provider-canary/internal/metrics/newrelic"
	"github.com/canary-release/terraform-provider-canary/internal/metrics/prometheus"
	"github.com/canary-release/terraform-provider-canary/internal/metrics/splunk"
	"github.com/canary-release/terraform-provider-canary/internal/metrics/stackdriver"
	"github.com/canary-release/terraform-provider-canary/internal/metrics/web"
)

var backends = map[string]backend.Backend{
	"cloudwatch":  cloudwatch.Backend(),
	"datadog":     datadog.Backend(),
	"dynatrace":   dynatrace.Backend(),
	"graphite":    graphite.Backend(),
	"influxdb":    influxdb.Backend(),
	"newrelic":    newrelic.Backend(),
	"prometheus":  prometheus.Backend(),
	"splunk":      splunk.Backend(),
	"stackdriver": stackdriver.Backend(),
	"web":         web.Backend(),
}

// Get is the backend of a type name.
func Get(name string) (backend.Backend, bool) {
	b, ok := backends[name]
	return b, ok
}

// Names are the backends' type names, sorted.
func Names() []string { return slices.Sorted(maps.Keys(backends)) }
