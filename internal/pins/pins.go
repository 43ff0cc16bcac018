//go:build deps

// Package pins pins modules the project imports, until every one of them is used in code.
package pins

import (
	_ "github.com/gofrs/flock"
	_ "github.com/hashicorp/terraform-plugin-framework-timeouts/resource/timeouts"
	_ "github.com/hashicorp/terraform-plugin-framework-validators/int64validator"
	_ "github.com/hashicorp/terraform-plugin-framework/providerserver"
	_ "github.com/hashicorp/terraform-plugin-go/tfprotov6"
	_ "github.com/hashicorp/terraform-plugin-log/tflog"
	_ "github.com/hashicorp/terraform-plugin-testing/helper/resource"
	_ "github.com/prometheus/client_golang/api/prometheus/v1"
	_ "github.com/prometheus/client_golang/prometheus/promhttp"
	_ "github.com/prometheus/client_golang/prometheus/testutil"
	_ "github.com/prometheus/common/model"
	_ "k8s.io/client-go/dynamic/dynamicinformer"
	_ "k8s.io/client-go/dynamic/fake"
	_ "k8s.io/client-go/kubernetes/fake"
	_ "sigs.k8s.io/yaml"
)
