// Package logging holds the operator's logger plumbing.
package logging

import "github.com/go-logr/logr"

// Lazy returns l with WithValues made lazy: the derived logger only records its key/value pairs, and l's sink
// encodes them when a line is written. controller-runtime derives a logger with five values (controller, kind,
// namespace, name, reconcile ID) for every reconcile, and zap encodes them at once into a fresh buffer: that was
// 5 % of the bytes the operator allocated in a 500-cluster benchmark, for reconciles that almost never log. Lines
// carry the same fields, in the same order, as with l itself.
func Lazy(l logr.Logger) logr.Logger {
	sink := l.GetSink()
	if sink == nil {
		return l
	}
	// One more frame (lazySink's method) sits between the caller and the wrapped sink.
	if cd, ok := sink.(logr.CallDepthLogSink); ok {
		sink = cd.WithCallDepth(1)
	}
	return logr.New(&lazySink{sink: sink})
}

type lazySink struct {
	sink logr.LogSink
	kv   []any // recorded by WithValues, passed before each line's own pairs
}

var (
	_ logr.LogSink          = (*lazySink)(nil)
	_ logr.CallDepthLogSink = (*lazySink)(nil)
)

// Init does nothing: the wrapped sink was initialised by the logger it came from.
func (s *lazySink) Init(logr.RuntimeInfo) {}

func (s *lazySink) Enabled(level int) bool { return s.sink.Enabled(level) }

func (s *lazySink) Info(level int, msg string, kv ...any) { s.sink.Info(level, msg, s.with(kv)...) }

func (s *lazySink) Error(err error, msg string, kv ...any) { s.sink.Error(err, msg, s.with(kv)...) }

func (s *lazySink) WithValues(kv ...any) logr.LogSink {
	return &lazySink{sink: s.sink, kv: append(s.kv[:len(s.kv):len(s.kv)], kv...)}
}

func (s *lazySink) WithName(name string) logr.LogSink {
	return &lazySink{sink: s.sink.WithName(name), kv: s.kv}
}

func (s *lazySink) WithCallDepth(depth int) logr.LogSink {
	if cd, ok := s.sink.(logr.CallDepthLogSink); ok {
		return &lazySink{sink: cd.WithCallDepth(depth), kv: s.kv}
	}
	return s
}

func (s *lazySink) with(kv []any) []any {
	if len(s.kv) == 0 {
		return kv
	}
	return append(s.kv[:len(s.kv):len(s.kv)], kv...)
}
