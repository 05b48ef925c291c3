package raycluster

import (
	"errors"
	"fmt"
	"testing"
)

func TestOnlyBackedOff(t *testing.T) {
	bo := &backedOff{errors.New("refused")}
	other := errors.New("list failed")
	for _, c := range []struct {
		err  error
		want bool
	}{
		{nil, false}, {other, false}, {bo, true},
		{fmt.Errorf("group w: %w", bo), true},
		{errors.Join(nil, fmt.Errorf("x: %w", errors.Join(bo, bo))), true},
		{errors.Join(bo, other), false},
	} {
		if got := onlyBackedOff(c.err); got != c.want {
			t.Errorf("onlyBackedOff(%v) = %v, want %v", c.err, got, c.want)
		}
	}
}
