# syntax=docker/dockerfile:1.7
# tiergate image: a static-ish Rust build on Debian 12, run as an unprivileged user on distroless (no shell, no
# package manager). The binary is /tiergate, which the Helm chart runs as `/tiergate run ...`.
#
#   docker build -t ghcr.io/tiergate/tiergate:$(cargo metadata --no-deps --format-version 1 | jq -r '.packages[]|select(.name=="tiergate").version') .

ARG RUST_VERSION=1.95
FROM docker.io/library/rust:${RUST_VERSION}-bookworm AS builder
WORKDIR /src
# rustls with ring only: no OpenSSL. The release profile (thin LTO) is set in Cargo.toml.
COPY . .
RUN --mount=type=cache,target=/usr/local/cargo/registry,sharing=locked \
    --mount=type=cache,target=/usr/local/cargo/git,sharing=locked \
    --mount=type=cache,target=/src/target,sharing=locked \
    cargo build --release --locked -p tiergate --bin tiergate \
 && install -D -m 0755 target/release/tiergate /out/tiergate

# glibc, libgcc and CA certificates, uid/gid 65532 ("nonroot"); matches the chart's runAsUser/runAsGroup.
FROM gcr.io/distroless/cc-debian12:nonroot
LABEL org.opencontainers.image.title="tiergate" \
      org.opencontainers.image.description="Kueue tiers, GPU classes and priorities from one TierPolicy" \
      org.opencontainers.image.licenses="Apache-2.0"
COPY --from=builder /out/tiergate /tiergate
USER 65532:65532
# 8443: admission webhook (HTTPS); 8080: /healthz, /readyz, /metrics.
EXPOSE 8443 8080
ENTRYPOINT ["/tiergate"]
CMD ["--help"]
