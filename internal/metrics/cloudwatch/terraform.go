package cloudwatch

import (
	"context"

	"github.com/hashicorp/terraform-plugin-framework/provider/schema"
	"github.com/hashicorp/terraform-plugin-framework/types"

	"github.com/canary-release/terraform-provider-canary/internal/metrics"
	"github.com/canary-release/terraform-provider-canary/internal/metrics/backend"
)

// Backend is the cloudwatch metric backend: Amazon CloudWatch's GetMetricData (internal/metrics/cloudwatch).
func Backend() backend.Backend {
	return backend.Backend{
		Description: "Amazon CloudWatch (Flagger's `cloudwatch`): the template's `query` is a JSON array of " +
			"[MetricDataQuery](https://docs.aws.amazon.com/AmazonCloudWatch/latest/APIReference/API_MetricDataQuery.html) objects, " +
			"as in Flagger. It runs with GetMetricData over the ten metric intervals before now; the value is the newest datapoint " +
			"of the first result (no result or datapoint fails the check, as in Flagger). Credentials: `access_key_id` and " +
			"`secret_access_key`, or, without them, the AWS default credential chain of the machine running Terraform.",
		Attributes: map[string]schema.Attribute{
			"region": schema.StringAttribute{Required: true, MarkdownDescription: "AWS region, such as `eu-west-1`."},
			"endpoint": schema.StringAttribute{Optional: true,
				MarkdownDescription: "CloudWatch endpoint URL, in place of the region's (a VPC endpoint, or a test double)."},
			"access_key_id": schema.StringAttribute{Optional: true, Sensitive: true,
				MarkdownDescription: "Access key ID. Unset: the AWS default credential chain (environment, shared files, web identity, container or instance role)."},
			"secret_access_key": schema.StringAttribute{Optional: true, Sensitive: true,
				MarkdownDescription: "Secret access key, with `access_key_id`."},
			"session_token": schema.StringAttribute{Optional: true, Sensitive: true,
				MarkdownDescription: "Session token of temporary credentials, with `access_key_id`."},
		},
		Build: backend.Build("CloudWatch", newFromModel),
	}
}

type cloudWatchBackendModel struct {
	Region          types.String `tfsdk:"region"`
	Endpoint        types.String `tfsdk:"endpoint"`
	AccessKeyID     types.String `tfsdk:"access_key_id"`
	SecretAccessKey types.String `tfsdk:"secret_access_key"`
	SessionToken    types.String `tfsdk:"session_token"`
}

func newFromModel(ctx context.Context, m cloudWatchBackendModel, _ metrics.HTTPConfig) (metrics.Querier, []string, error) {
	cfg := Config{
		Region: m.Region.ValueString(), Endpoint: m.Endpoint.ValueString(),
		AccessKeyID: m.AccessKeyID.ValueString(), SecretAccessKey: m.SecretAccessKey.ValueString(), SessionToken: m.SessionToken.ValueString(),
	}
	secrets := backend.Secrets(cfg.AccessKeyID, cfg.SecretAccessKey, cfg.SessionToken)
	if cfg.SessionToken != "" && cfg.AccessKeyID == "" {
		return nil, secrets, &backend.AttributeError{Attribute: "session_token", Summary: "Session token without keys",
			Detail: "goes with access_key_id and secret_access_key; set them too, or unset it."}
	}
	q, err := New(ctx, cfg)
	return q, secrets, err
}
