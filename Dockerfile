# Manta's image: the manta binary (operator, apiserver) and /puller, the tiny static binary ImagePullJob puller pods
# copy into the target image (so images with no shell or libc can be pre-pulled).
FROM golang:1.26 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
RUN CGO_ENABLED=0 go build -trimpath -ldflags='-s -w' -o /out/manta ./cmd/manta && \
    CGO_ENABLED=0 go build -trimpath -ldflags='-s -w' -o /out/puller ./cmd/puller

FROM gcr.io/distroless/static:nonroot
COPY --from=build /out/manta /manta
COPY --from=build /out/puller /puller
USER 65532:65532
ENTRYPOINT ["/manta"]
