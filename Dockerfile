# syntax=docker/dockerfile:1
#
# The outboxd image: one static binary on a distroless base, no shell, a
# non-root user. `make image` builds it with Docker or Podman; docs/deploy.md
# says how it is run (compose, Kubernetes). deploy/dockerfile_test.go holds
# this file to its rules: the Go version follows go.mod, the binary is static
# (CGO off) and built with -trimpath, the final stage runs as a numeric
# non-root user, the entrypoint is the binary in exec form, and there is no
# HEALTHCHECK (the image has no shell or HTTP client: orchestrators probe
# /healthz and /readyz over HTTP).

# The Go toolchain of the build: go.mod's go line (1.26), at the patch
# release the project is built and benchmarked with.
ARG GO_VERSION=1.26.8

FROM --platform=$BUILDPLATFORM golang:${GO_VERSION} AS build
WORKDIR /src
# Modules first, so a change of the sources reuses the download layer.
COPY go.mod go.sum ./
RUN --mount=type=cache,target=/go/pkg/mod go mod download
COPY . .
# Cross-compiled for the platform asked for (docker buildx --platform),
# natively by default.
ARG TARGETOS
ARG TARGETARCH
RUN --mount=type=cache,target=/go/pkg/mod --mount=type=cache,target=/root/.cache/go-build \
    CGO_ENABLED=0 GOOS=${TARGETOS} GOARCH=${TARGETARCH} \
    go build -trimpath -ldflags="-s -w" -o /out/outboxd ./cmd/outboxd
# The working directory of the final image, owned by the user it runs as,
# so `outboxd dev` can create its default SQLite store (data/outboxd.db)
# there when a volume is mounted on it or the root filesystem is writable.
RUN mkdir -p /out/var/lib/outboxd

# static-debian13:nonroot holds CA certificates (rediss://, TLS to MongoDB
# and PostgreSQL), tzdata and /etc/passwd with the user nonroot (65532), and
# nothing else: no shell, no package manager.
FROM gcr.io/distroless/static-debian13:nonroot

ARG VERSION=dev
ARG REVISION=unknown
ARG CREATED=unknown
LABEL org.opencontainers.image.title="outboxd" \
      org.opencontainers.image.description="Transactional outbox relay: MongoDB or SQLite system of record, Redis stream, PostgreSQL read model" \
      org.opencontainers.image.source="https://github.com/outboxd/outboxd" \
      org.opencontainers.image.url="https://github.com/outboxd/outboxd" \
      org.opencontainers.image.documentation="https://github.com/outboxd/outboxd/blob/main/docs/deploy.md" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}" \
      org.opencontainers.image.created="${CREATED}"

COPY --from=build /out/outboxd /usr/local/bin/outboxd
COPY --from=build --chown=65532:65532 /out/var/lib/outboxd /var/lib/outboxd
WORKDIR /var/lib/outboxd
# Numeric, so Kubernetes' runAsNonRoot can check it without /etc/passwd.
USER 65532:65532
# Every long-running role serves /healthz, /readyz and /metrics on
# --http-addr; give it 0.0.0.0:8080 (or :8080) inside a container.
EXPOSE 8080
ENTRYPOINT ["outboxd"]
CMD ["help"]
