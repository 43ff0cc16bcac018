#!/usr/bin/env bash
# Builds kube-apiserver, kube-controller-manager and kube-scheduler from the Go module proxy
# into $1 (a bin folder). A throw-away module is needed because k8s.io/kubernetes pins its
# staging modules at v0.0.0 and only works with a replace for each of them.
set -euo pipefail
bin_dir=$1
work_dir=$2
kube_version=${KUBE_VERSION:-v1.34.3}
staging_version=v0${kube_version#v1}
mkdir -p "$bin_dir" "$work_dir"
cd "$work_dir"
staging="api apiextensions-apiserver apimachinery apiserver cli-runtime client-go cloud-provider
cluster-bootstrap code-generator component-base component-helpers controller-manager cri-api
cri-client csi-translation-lib dynamic-resource-allocation endpointslice externaljwt kms
kube-aggregator kube-controller-manager kube-proxy kube-scheduler kubectl kubelet metrics
mount-utils pod-security-admission sample-apiserver sample-cli-plugin sample-controller"
{
  echo "module localstack/kubebuild"
  echo
  echo "go 1.24"
  echo
  echo "require k8s.io/kubernetes $kube_version"
  echo
  for m in $staging; do echo "replace k8s.io/$m => k8s.io/$m $staging_version"; done
} > go.mod
cat > tools.go <<'GO'
//go:build tools

package kubebuild

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kube-scheduler"
)
GO
GOFLAGS=-mod=mod go mod tidy
minor=${kube_version#v1.}; minor=${minor%%.*}
ldflags="-s -w -X k8s.io/component-base/version.gitVersion=$kube_version -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=$minor"
# Built aside and moved in, so an interrupted build never leaves a partial binary in bin_dir.
mkdir -p out
go build -trimpath -ldflags "$ldflags" -o out/ \
  k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kube-controller-manager k8s.io/kubernetes/cmd/kube-scheduler
mv -f out/kube-apiserver out/kube-controller-manager out/kube-scheduler "$bin_dir/"
