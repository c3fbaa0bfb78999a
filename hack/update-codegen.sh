#!/usr/bin/env bash
# Regenerates deepcopy, OpenAPI definitions, the typed clientset, listers and
# informers for the gateway API. Run through `make generate`, which builds the
# generators from hack/tools at the pinned versions into $BIN.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${BIN:-$PWD/_output/bin}
MODULE=github.com/clustergateway/cluster-gateway
API=$MODULE/pkg/apis/gateway/v1alpha1
HDR=hack/boilerplate.go.txt

"$BIN/deepcopy-gen" --go-header-file "$HDR" --output-file zz_generated.deepcopy.go ./pkg/apis/gateway/v1alpha1

# Model names first, for our package only: openapi-gen writes them into every
# input package that has the tag, and the apimachinery ones live in the
# read-only module cache.
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
"$BIN/openapi-gen" --go-header-file "$HDR" \
  --output-dir "$TMP" --output-pkg "$API" --output-file zz_generated.openapi.go \
  --output-model-name-file zz_generated.model_name.go --report-filename /dev/null \
  ./pkg/apis/gateway/v1alpha1
"$BIN/openapi-gen" --go-header-file "$HDR" \
  --output-dir pkg/apis/gateway/v1alpha1 --output-pkg "$API" --output-file zz_generated.openapi.go \
  --report-filename /dev/null \
  k8s.io/apimachinery/pkg/apis/meta/v1 k8s.io/apimachinery/pkg/runtime k8s.io/apimachinery/pkg/version \
  ./pkg/apis/gateway/v1alpha1

rm -rf pkg/generated
"$BIN/client-gen" --go-header-file "$HDR" --clientset-name versioned \
  --input-base "" --input "$API" \
  --output-dir pkg/generated/clientset --output-pkg "$MODULE/pkg/generated/clientset"
"$BIN/lister-gen" --go-header-file "$HDR" \
  --output-dir pkg/generated/listers --output-pkg "$MODULE/pkg/generated/listers" ./pkg/apis/gateway/v1alpha1
"$BIN/informer-gen" --go-header-file "$HDR" \
  --versioned-clientset-package "$MODULE/pkg/generated/clientset/versioned" \
  --listers-package "$MODULE/pkg/generated/listers" \
  --output-dir pkg/generated/informers --output-pkg "$MODULE/pkg/generated/informers" ./pkg/apis/gateway/v1alpha1
