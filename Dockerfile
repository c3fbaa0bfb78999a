# The gateway image: a static binary on distroless, running as non-root.
#   make image      (stamps the version from git describe; see the Makefile)
#   docker build --build-arg VERSION=v0.1.0 -t cluster-gateway:v0.1.0 .
FROM golang:1.26 AS build
ARG VERSION=v0.0.0-unknown
ARG GIT_COMMIT=
ARG BUILD_DATE=
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY cmd/ cmd/
COPY pkg/ pkg/
RUN CGO_ENABLED=0 go build -trimpath -ldflags "-s -w \
      -X github.com/clustergateway/cluster-gateway/pkg/version.Version=${VERSION} \
      -X github.com/clustergateway/cluster-gateway/pkg/version.GitCommit=${GIT_COMMIT} \
      -X github.com/clustergateway/cluster-gateway/pkg/version.BuildDate=${BUILD_DATE}" \
    -o /cluster-gateway ./cmd/apiserver

FROM gcr.io/distroless/static:nonroot
COPY --from=build /cluster-gateway /cluster-gateway
USER 65532:65532
ENTRYPOINT ["/cluster-gateway"]
