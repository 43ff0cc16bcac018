// Package conformance tests the routers of every mesh driver against the fake API clients (and,
// in TestAgainstAPIServer, a real API server with the CRD stand-ins): the exact objects each
// writes, and the shared behaviour each must have (verified writes, retries, refusals,
// hand-over on destroy, A/B matching). These tests run one table over several routers, so they
// live here rather than beside a driver; it holds no production code.
package conformance
