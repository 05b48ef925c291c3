package logging

import (
	"fmt"
	"io"

	"github.com/go-logr/logr"
	"github.com/go-logr/zapr"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"gopkg.in/natefinch/lumberjack.v2"
	crzap "sigs.k8s.io/controller-runtime/pkg/log/zap"
)

// Outputs are KubeRay's log flags (--log-stdout-encoder, --log-file-path, --log-file-encoder) and the fields of its
// Configuration file that say the same (logStdoutEncoder, logFile, logFileEncoder).
type Outputs struct {
	// StdoutEncoder is json or console; empty keeps what the --zap-* flags chose (JSON unless --zap-devel).
	StdoutEncoder string
	// File, when set, receives every line too, rotated as KubeRay rotates it (500 MB, 10 files, 30 days).
	File string
	// FileEncoder is the file's encoder, json (the default) or console.
	FileEncoder string
}

// Encoders are the values the encoder settings take.
var Encoders = []string{"json", "console"}

// New builds the operator's logger from the --zap-* options and out. The closer closes the log file (a no-op
// without one).
func New(opts crzap.Options, out Outputs) (logr.Logger, io.Closer, error) {
	if out.StdoutEncoder != "" {
		enc, err := encoderFunc(out.StdoutEncoder)
		if err != nil {
			return logr.Logger{}, nil, fmt.Errorf("stdout log encoder: %w", err)
		}
		opts.Encoder, opts.NewEncoder = nil, enc
	}
	raw := crzap.NewRaw(crzap.UseFlagOptions(&opts))
	if out.File == "" {
		return zapr.NewLogger(raw), io.NopCloser(nil), nil
	}
	fileEnc := out.FileEncoder
	if fileEnc == "" {
		fileEnc = "json"
	}
	enc, err := encoderFunc(fileEnc)
	if err != nil {
		return logr.Logger{}, nil, fmt.Errorf("log file encoder: %w", err)
	}
	w := &lumberjack.Logger{Filename: out.File, MaxSize: 500, MaxBackups: 10, MaxAge: 30}
	level := opts.Level
	if level == nil {
		level = zapcore.InfoLevel
	}
	// Timestamps in the file as KubeRay writes them (ISO 8601), whatever --zap-time-encoding says for stdout.
	fileCore := zapcore.NewCore(enc(func(c *zapcore.EncoderConfig) { c.EncodeTime = zapcore.ISO8601TimeEncoder }), zapcore.AddSync(w), level)
	tee := raw.WithOptions(zap.WrapCore(func(c zapcore.Core) zapcore.Core { return zapcore.NewTee(c, fileCore) }))
	return zapr.NewLogger(tee), w, nil
}

// encoderFunc is the zap encoder KubeRay names json or console, on zap's production encoder config.
func encoderFunc(name string) (crzap.NewEncoderFunc, error) {
	var build func(zapcore.EncoderConfig) zapcore.Encoder
	switch name {
	case "json":
		build = zapcore.NewJSONEncoder
	case "console":
		build = zapcore.NewConsoleEncoder
	default:
		return nil, fmt.Errorf("%q is not an encoder (json or console)", name)
	}
	return func(eco ...crzap.EncoderConfigOption) zapcore.Encoder {
		c := zap.NewProductionEncoderConfig()
		for _, o := range eco {
			o(&c)
		}
		return build(c)
	}, nil
}
