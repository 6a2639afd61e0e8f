package option_test

import (
	"errors"
	"log/slog"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/jetbus/jetbus/internal/option"
)

type settings struct {
	option.Common
	extra int
}

type opt func(*settings) error

func TestApply(t *testing.T) {
	o, err := option.Apply[settings]([]opt{nil, option.Logger[settings](nil), func(s *settings) error { s.extra = 7; return nil }})
	if err != nil || o.Logger == nil || o.Registerer != nil || o.extra != 7 {
		t.Fatalf("defaults: %+v, %v", o, err)
	}
	l, r := slog.Default(), prometheus.NewRegistry()
	o, err = option.Apply[settings]([]opt{option.Logger[settings](l), option.Registerer[settings](r)})
	if err != nil || o.Logger != l || o.Registerer != r {
		t.Fatalf("set: %+v, %v", o, err)
	}
	tp := noop.NewTracerProvider()
	if o, _ = option.Apply[settings]([]opt{option.TracerProvider[settings](tp)}); o.TracerProvider != tp {
		t.Fatalf("tracer provider: %+v", o)
	}
	boom := errors.New("boom")
	if _, err := option.Apply[settings]([]opt{func(*settings) error { return boom }}); !errors.Is(err, boom) {
		t.Fatalf("error: %v", err)
	}
}
