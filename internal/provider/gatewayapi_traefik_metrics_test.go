package provider

import (
	"os"
	"testing"
)

// traefikGatewayTemplates is the Gateway API guide's provider block for Traefik as the
// implementation: metric templates on Traefik's own service metrics.
const traefikGatewayTemplates = examplesRoot + "/guides/gatewayapi-traefik/main.tf"

// traefikTemplateMetrics are the analyses' two checks through those templates.
const traefikTemplateMetrics = `
      { name = "request-success-rate", interval = "10s", template_ref = "traefik-success-rate", threshold_range = { min = 99 } },
      { name = "request-duration", interval = "10s", template_ref = "traefik-duration", threshold_range = { max = 500 } },`

// TestAccGatewayAPI_traefikMetricTemplates (issue 33 item 5): a gatewayapi release on the
// stack's Traefik GatewayClass, judged by the guide's metric templates. The simulator exports
// no gateway series for Traefik's GatewayClass, so every value they read comes from the real
// Traefik: the promotion passes on the canary's real answers through it, and a canary failing
// every request is rolled back on the 500s Traefik counted (runRealProxy).
func TestAccGatewayAPI_traefikMetricTemplates(t *testing.T) {
	provider, err := os.ReadFile(traefikGatewayTemplates)
	if err != nil {
		t.Fatal(err)
	}
	runRealProxy(t, func(ns string) routerCase {
		rc := gatewayOnTraefik(ns)
		rc.preamble = string(provider)
		rc.metrics = traefikTemplateMetrics
		return rc
	})
}
