package integration

import (
	"fmt"
	"os"
	"testing"
)

// TestMain runs the tests in hack/, where they read the scripts and tool modules by paths relative to it.
func TestMain(m *testing.M) {
	if err := os.Chdir(".."); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	os.Exit(m.Run())
}
