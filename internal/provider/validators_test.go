package provider

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/schema/validator"
	"github.com/hashicorp/terraform-plugin-framework/types"
)

func TestDurationValidator(t *testing.T) {
	goDuration := durationValidator{Minimum: time.Second}
	promQL := durationValidator{Minimum: time.Second, PromQL: true}
	for _, tc := range []struct {
		v       durationValidator
		value   types.String
		wantErr string
	}{
		{goDuration, types.StringValue("30s"), ""},
		{goDuration, types.StringValue("1m30s"), ""},
		{goDuration, types.StringValue("1.5s"), ""},
		{goDuration, types.StringNull(), ""},
		{goDuration, types.StringUnknown(), ""},
		{goDuration, types.StringValue("500ms"), `analysis.interval must be at least 1s; got "500ms"`},
		{goDuration, types.StringValue("0s"), "at least 1s"},
		{goDuration, types.StringValue("-5s"), "at least 1s"},
		{goDuration, types.StringValue("10"), `must be a Go duration such as`},
		{goDuration, types.StringValue("999999999999h"), "must be a Go duration"},
		{goDuration, types.StringValue("1 minute"), "must be a Go duration"},
		{promQL, types.StringValue("1m30s"), ""},
		{promQL, types.StringValue("1.5m"), "must be a PromQL duration"},
		{promQL, types.StringValue("0s"), "at least 1s"},
	} {
		resp := &validator.StringResponse{}
		tc.v.ValidateString(context.Background(), validator.StringRequest{Path: path.Root("analysis").AtName("interval"), ConfigValue: tc.value}, resp)
		got := ""
		if resp.Diagnostics.HasError() {
			got = resp.Diagnostics.Errors()[0].Detail()
		}
		switch {
		case tc.wantErr == "" && got != "":
			t.Errorf("%s (promQL %v): unexpected error %q", tc.value, tc.v.PromQL, got)
		case tc.wantErr != "" && !strings.Contains(got, tc.wantErr):
			t.Errorf("%s (promQL %v): error %q, want one containing %q", tc.value, tc.v.PromQL, got, tc.wantErr)
		}
	}
}

func TestNameAndURLValidators(t *testing.T) {
	release := objectNameValidator{suffixes: []string{"-canary-release", "-canary-release-lock"}, what: "its objects"}
	target := objectNameValidator{suffixes: []string{"-primary", "-canary"}, label: true, what: "its Services"}
	for _, tc := range []struct {
		v       validator.String
		value   string
		wantErr string
	}{
		{release, "podinfo", ""},
		{release, "podinfo.v2", ""},
		{release, "Podinfo", `"Podinfo" is not`},
		{release, strings.Repeat("a", 235), `-canary-release-lock" is not`},
		{target, "podinfo", ""},
		{target, "1podinfo", "DNS-1035 label"},
		{target, "pod.info", "DNS-1035 label"},
		{target, strings.Repeat("a", 56), `-primary" is not`},
		{target, strings.Repeat("a", 55), ""},
		{webhookURLValidator{}, "http://loadtester.test/", ""},
		{webhookURLValidator{}, "https://hooks.example.com/T000/B000/secret", ""},
		{webhookURLValidator{}, "ftp://example.com/", "absolute http:// or https:// URL"},
		{webhookURLValidator{}, "loadtester.test/", "absolute http:// or https:// URL"},
		{webhookURLValidator{}, "http:///path", "absolute http:// or https:// URL"},
	} {
		resp := &validator.StringResponse{}
		tc.v.ValidateString(context.Background(), validator.StringRequest{Path: path.Root("name"), ConfigValue: types.StringValue(tc.value)}, resp)
		got := ""
		if resp.Diagnostics.HasError() {
			got = resp.Diagnostics.Errors()[0].Detail()
		}
		switch {
		case tc.wantErr == "" && got != "":
			t.Errorf("%q: unexpected error %q", tc.value, got)
		case tc.wantErr != "" && !strings.Contains(got, tc.wantErr):
			t.Errorf("%q: error %q, want one containing %q", tc.value, got, tc.wantErr)
		}
		if strings.Contains(got, "secret") {
			t.Errorf("%q: the error repeats the URL, which may carry a token: %q", tc.value, got)
		}
	}
}

func TestLabelPortAndQueryValidators(t *testing.T) {
	for _, tc := range []struct {
		v       validator.String
		value   string
		wantErr string
	}{
		{dnsLabelValidator{}, "default", ""},
		{dnsLabelValidator{}, "team-1", ""},
		{dnsLabelValidator{}, "1team", ""},
		{dnsLabelValidator{}, "Team", `must be a DNS-1123 label (lowercase letters, digits and '-'`},
		{dnsLabelValidator{}, "team_a", `"team_a" is not`},
		{dnsLabelValidator{}, "", "DNS-1123 label"},
		{dnsLabelValidator{}, strings.Repeat("a", 64), "at most 63 characters"},
		{targetPortValidator{}, "9898", ""},
		{targetPortValidator{}, "http", ""},
		{targetPortValidator{}, "http-metrics", ""},
		{targetPortValidator{}, "0", "a port number from 1 to 65535"},
		{targetPortValidator{}, "65536", `"65536" is not`},
		{targetPortValidator{}, "-1", "a port number from 1 to 65535"},
		{targetPortValidator{}, "http_port", "container port name of at most 15"},
		{targetPortValidator{}, "a-very-long-port-name", "container port name of at most 15"},
		{targetPortValidator{}, "", "a port number from 1 to 65535"},
		{queryTemplateValidator{}, `sum(rate(x{namespace="{{ namespace }}",pod=~"{{ target }}-[0-9a-z]+"}[{{ interval }}]))`, ""},
		{queryTemplateValidator{}, `{{ name }} {{ service }} {{ ingress }} {{ route }}`, ""},
		{queryTemplateValidator{}, `vector(1)`, ""},
		{queryTemplateValidator{}, `sum(rate(x[{{ interval }]))`, "must be a PromQL query, as a Go template that uses only the variables"},
		{queryTemplateValidator{}, `sum(x{cluster="{{ cluster }}"})`, `function "cluster" not defined`},
		{queryTemplateValidator{}, `sum(x{kind="{{ variables.kind }}"})`, `no entry for key "kind"`},
		{queryTemplateValidator{}, ``, "it is empty"},
		{queryTemplateValidator{}, " \n", "it is empty"},
	} {
		resp := &validator.StringResponse{}
		tc.v.ValidateString(context.Background(), validator.StringRequest{Path: path.Root("service").AtName("target_port"), ConfigValue: types.StringValue(tc.value)}, resp)
		got := ""
		if resp.Diagnostics.HasError() {
			got = resp.Diagnostics.Errors()[0].Detail()
		}
		switch {
		case tc.wantErr == "" && got != "":
			t.Errorf("%T %q: unexpected error %q", tc.v, tc.value, got)
		case tc.wantErr != "" && !strings.Contains(got, tc.wantErr):
			t.Errorf("%T %q: error %q, want one containing %q", tc.v, tc.value, got, tc.wantErr)
		case tc.wantErr != "" && !strings.HasPrefix(got, "service.target_port must be "):
			t.Errorf("%T %q: error %q does not start with the attribute path and what it must be", tc.v, tc.value, got)
		}
	}
	for _, v := range []validator.String{dnsLabelValidator{}, targetPortValidator{}, queryTemplateValidator{}} {
		resp := &validator.StringResponse{}
		for _, value := range []types.String{types.StringNull(), types.StringUnknown()} {
			v.ValidateString(context.Background(), validator.StringRequest{Path: path.Root("x"), ConfigValue: value}, resp)
		}
		if resp.Diagnostics.HasError() {
			t.Errorf("%T rejects a null or unknown value: %v", v, resp.Diagnostics)
		}
	}
}
