# Manta's image: the manta binary (operator, apiserver) and /puller, the tiny static binary ImagePullJob puller pods
# copy into the target image (so images with no shell or libc can be pre-pulled).
FROM golang:1.26 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
# COMMIT (docker build --build-arg COMMIT=$(git rev-parse HEAD)) is what `manta version` reports; the version is
# internal/version.Version, which charts/manta's appVersion (the chart's default image tag) follows.
ARG COMMIT=unknown
RUN CGO_ENABLED=0 go build -trimpath -ldflags="-s -w -X github.com/manta-dev/manta/internal/version.Commit=${COMMIT}" -o /out/manta ./cmd/manta && \
    CGO_ENABLED=0 go build -trimpath -ldflags='-s -w' -o /out/puller ./cmd/puller

FROM gcr.io/distroless/static:nonroot
COPY --from=build /out/manta /manta
COPY --from=build /out/puller /puller
USER 65532:65532
ENTRYPOINT ["/manta"]
