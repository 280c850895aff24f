#!/bin/sh
# SPDX-License-Identifier: LGPL-2.1-or-later
# Generates the protobuf-c code of the OTLP logs protocol into OUTDIR, flat (meson's outputs
# cannot have directories): protoc-c writes opentelemetry/proto/.../NAME.pb-c.[ch] and includes
# them by that path, which is rewritten to the bare file name.
# Usage: gen.sh PROTOC_C PROTO_DIR OUTDIR
set -eu
protoc_c=$1 proto_dir=$2 outdir=$3
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
(cd "$proto_dir" && "$protoc_c" --c_out="$tmp" \
	opentelemetry/proto/common/v1/common.proto \
	opentelemetry/proto/resource/v1/resource.proto \
	opentelemetry/proto/logs/v1/logs.proto \
	opentelemetry/proto/collector/logs/v1/logs_service.proto)
find "$tmp" -name '*.pb-c.[ch]' | while read -r f; do
	sed 's|#include "opentelemetry/proto/[a-z/0-9]*/\([a-z_]*\.pb-c\.h\)"|#include "\1"|' "$f" >"$outdir/$(basename "$f")"
done
