#!/usr/bin/env bash
# Refreshes the vendored uPlot (src/skewscope/report/vendor/) from the npm registry.
# Usage: scripts/vendor_uplot.sh [VERSION]   (default 1.6.32). Commit the result.
set -euo pipefail
version="${1:-1.6.32}"
dest="$(cd "$(dirname "$0")/.." && pwd)/src/skewscope/report/vendor"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
(cd "$work" && npm pack --silent "uplot@${version}" >/dev/null && tar xzf "uplot-${version}.tgz")
cp "$work/package/dist/uPlot.iife.min.js" "$work/package/dist/uPlot.min.css" "$dest/"
cp "$work/package/LICENSE" "$dest/uPlot.LICENSE"
sed -i "s/uPlot [0-9.]*$/uPlot ${version}/; s/uplot@[0-9.]*/uplot@${version}/g" "$dest/README.md"
echo "vendored uplot ${version} into $dest"
