#!/usr/bin/env bash
# Rebuild k8s/kueue/manifests.yaml: Kueue's release manifests.yaml, as its Makefile's
# `artifacts` target builds it (prepare-manifests sets the controller image, then
# `kustomize build config/default`), from a clone of kubernetes-sigs/kueue.
#
#   scripts/kueue-vendor.sh /path/to/kueue/clone v0.19.2
#
# Needs git and kubectl (its built-in kustomize). Writes the file, SHA256SUMS and
# manifests.index.json: every document validated here, once (strictly, against each
# Kubernetes schema set kubernetes-validate ships from 1.31 on), and indexed by its sha256,
# so `estate check` reads the index instead of validating the release again
# (estate.check.kubernetes_schema.index_of; tests/unit/test_kueue_install.py validates the
# file again and holds the index to it). Update KUEUE_VERSION in
# estate/model/kubernetes.py and k8s/kueue/README.md to match.
set -euo pipefail
repo=$1 tag=$2
root=$(cd "$(dirname "$0")/.." && pwd)
out=$root/k8s/kueue
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
git -C "$repo" archive "$tag" config | tar -x -C "$work"
# the image a release promotes (IMAGE_REGISTRY=registry.k8s.io/kueue, tag = the release)
sed -i -e "s#newName: .*/kueue/kueue\$#newName: registry.k8s.io/kueue/kueue#" \
       -e "s#newTag: .*#newTag: $tag#" "$work/config/components/manager/kustomization.yaml"
kubectl kustomize "$work/config/default" > "$out/manifests.yaml"
(cd "$out" && sha256sum manifests.yaml > SHA256SUMS)
(cd "$root" && PYTHONPATH=$root "$root/.venv/bin/python" -m estate.check.kubernetes_schema)
cat "$out/SHA256SUMS"
