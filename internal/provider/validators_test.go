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
	goDuration := durationValidator{minimum: time.Second}
	promQL := durationValidator{minimum: time.Second, promQL: true}
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
			t.Errorf("%s (promQL %v): unexpected error %q", tc.value, tc.v.promQL, got)
		case tc.wantErr != "" && !strings.Contains(got, tc.wantErr):
			t.Errorf("%s (promQL %v): error %q, want one containing %q", tc.value, tc.v.promQL, got, tc.wantErr)
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
