# The gateway image: a static binary on distroless, running as non-root.
#   docker build -t cluster-gateway .
FROM golang:1.26 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY cmd/ cmd/
COPY pkg/ pkg/
RUN CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o /cluster-gateway ./cmd/apiserver

FROM gcr.io/distroless/static:nonroot
COPY --from=build /cluster-gateway /cluster-gateway
USER 65532:65532
ENTRYPOINT ["/cluster-gateway"]
