package provider

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/terraform-plugin-testing/helper/resource"

	"github.com/canary-release/terraform-provider-canary/internal/testbed/meshsim"
)

// TestAccTraefik_realProxy runs a traefik release through the stack's real Traefik: the
// simulator's client sends real requests with the IngressRoute's Host to Traefik's web entry
// point, Traefik picks the pod by the weights the release writes in the TraefikService, and
// the pod's answer carries its image (runRealProxy).
func TestAccTraefik_realProxy(t *testing.T) {
	runRealProxy(t, func(string) routerCase { return traefikRouter })
}

// clientRoutesNow reads what the simulator's client saw on the routes of ns (GET /client);
// nil when it cannot be read.
func (c *testCluster) clientRoutesNow(ns string) []meshsim.ClientRoute {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.env.SimulatorURL+"/client?namespace="+url.QueryEscape(ns), nil)
	if err != nil {
		return nil
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil
	}
	defer resp.Body.Close()
	var routes []meshsim.ClientRoute
	if json.NewDecoder(resp.Body).Decode(&routes) != nil {
		return nil
	}
	return routes
}

// clientAnswersNow reads how many of the client's requests in ns each image answered; nil
// when it cannot be read.
func (c *testCluster) clientAnswersNow(ns string) map[string]int64 {
	routes := c.clientRoutesNow(ns)
	if routes == nil {
		return nil
	}
	out := map[string]int64{}
	for _, r := range routes {
		for image, n := range r.Answered {
			out[image] += n
		}
	}
	return out
}

func (c *testCluster) clientAnswers(t *testing.T, ns string) map[string]int64 {
	t.Helper()
	got := c.clientAnswersNow(ns)
	if got == nil {
		t.Fatalf("cannot read the simulator's client counts at %s/client", c.env.SimulatorURL)
	}
	return got
}

// checkClientAnswers waits (up to 30 s, Traefik loads routes asynchronously) until 20 more of
// the client's requests were answered by image, while none of them by the images in notFrom.
func (c *testCluster) checkClientAnswers(ns, image string, notFrom []string) resource.TestCheckFunc {
	return checkCluster(func() error {
		var first, last map[string]int64
		for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(250 * time.Millisecond) {
			last = c.clientAnswersNow(ns)
			if first == nil {
				first = last
				continue
			}
			stray := false
			for _, other := range notFrom {
				stray = stray || last[other] > first[other]
			}
			if stray {
				// Traefik may still finish requests sent before the last change: start over.
				first = last
				continue
			}
			if last[image]-first[image] >= 20 {
				return nil
			}
		}
		return fmt.Errorf("requests through Traefik to the route in %s: want 20 answered by %s alone, answers went from %v to %v", ns, image, first, last)
	})
}

// checkNoClientEntries: the client saw no answer the application did not produce.
func (c *testCluster) checkNoClientEntries(ns string) resource.TestCheckFunc {
	return checkCluster(func() error {
		violations, err := c.env.InvariantViolations(context.Background(), ns)
		if err != nil {
			return err
		}
		var client []string
		for _, v := range violations {
			if strings.Contains(v, "client: ") {
				client = append(client, v)
			}
		}
		if len(client) > 0 {
			return fmt.Errorf("the client saw %d answers no pod gave, first: %s", len(client), client[0])
		}
		return nil
	})
}
