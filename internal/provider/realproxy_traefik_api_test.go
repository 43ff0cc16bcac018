package provider

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"sort"
	"strings"
	"time"

	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// What the stack's Traefik applies, read from its API (GET /api/http/services): Traefik loads
// its providers' changes asynchronously (at most one configuration every 2 s by default), so a
// count of what it serves starts once it applies the step, not when the objects hold it.

// traefikAPIService is one service of Traefik's applied configuration.
type traefikAPIService struct {
	Name         string `json:"name"`
	LoadBalancer *struct {
		Servers []struct {
			URL string `json:"url"`
		} `json:"servers"`
	} `json:"loadBalancer"`
	Weighted *struct {
		Services []struct {
			Name   string `json:"name"`
			Weight int    `json:"weight"`
		} `json:"services"`
	} `json:"weighted"`
}

func (c *testCluster) traefikServices(ctx context.Context) ([]traefikAPIService, error) {
	if c.env.ProxyAPIURL == "" {
		return nil, fmt.Errorf("the stack does not export Traefik's API (CANARY_PROXY_API_ADDRESS); make down && make up")
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.env.ProxyAPIURL+"/api/http/services", nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var out []traefikAPIService
	return out, json.NewDecoder(resp.Body).Decode(&out)
}

// waitTraefikApplied waits (up to 30 s) until applied accepts Traefik's services; it returns
// the last reason it did not.
func (c *testCluster) waitTraefikApplied(ctx context.Context, what string, applied func([]traefikAPIService) error) error {
	var last error
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		services, err := c.traefikServices(ctx)
		if err == nil {
			err = applied(services)
		}
		if last = err; err == nil {
			return nil
		}
	}
	return fmt.Errorf("Traefik did not apply %s within 30 s: %w", what, last)
}

// canaryWeightApplied: a weighted service of Traefik's (a TraefikService's, an HTTPRoute
// rule's) gives the canary Service of ns weight w.
func canaryWeightApplied(ns string, w int) func([]traefikAPIService) error {
	return func(services []traefikAPIService) error {
		var seen []string
		for _, s := range services {
			if s.Weighted == nil {
				continue
			}
			for _, child := range s.Weighted.Services {
				if strings.HasPrefix(child.Name, ns+"-podinfo-canary-") {
					if child.Weight == w {
						return nil
					}
					seen = append(seen, fmt.Sprintf("%s: %d", s.Name, child.Weight))
				}
			}
		}
		return fmt.Errorf("the canary's weight is %v, want %d", seen, w)
	}
}

// serversApplied: Traefik's service for the Service name of ns (an Ingress backend, port
// port) sends to exactly the Ready endpoints the Service's EndpointSlices hold now.
func (c *testCluster) serversApplied(ctx context.Context, ns, name string, port int) func([]traefikAPIService) error {
	return func(services []traefikAPIService) error {
		slices, err := c.kube.DiscoveryV1().EndpointSlices(ns).List(ctx, metav1.ListOptions{LabelSelector: discoveryv1.LabelServiceName + "=" + name})
		if err != nil {
			return err
		}
		var want []string
		for _, s := range slices.Items {
			for _, e := range s.Endpoints {
				if e.Conditions.Ready == nil || *e.Conditions.Ready {
					for _, a := range e.Addresses {
						want = append(want, fmt.Sprintf("http://%s:%d", a, port))
					}
				}
			}
		}
		var got []string
		for _, s := range services {
			if s.Name == fmt.Sprintf("%s-%s-%d@kubernetes", ns, name, port) && s.LoadBalancer != nil {
				for _, server := range s.LoadBalancer.Servers {
					got = append(got, server.URL)
				}
			}
		}
		sort.Strings(want)
		sort.Strings(got)
		if len(want) == 0 || strings.Join(got, " ") != strings.Join(want, " ") {
			return fmt.Errorf("Traefik sends Service %s/%s's requests to %v, its Ready endpoints are %v", ns, name, got, want)
		}
		return nil
	}
}
