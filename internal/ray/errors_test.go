package ray

import (
	"context"
	"errors"
	"io"
	"net/http"
	"testing"
)

// Ray 2.52 answers DELETE /api/jobs/<id> of a running job with 500 and a traceback ending in this text.
const rayDeleteRunning = `Traceback (most recent call last):
  File "/ray/dashboard/modules/job/job_manager.py", line 620, in delete_job
    raise RuntimeError(
RuntimeError: Attempted to delete job 'job-1', but it is in a non-terminal state RUNNING.`

func TestDeleteRunningJobIsNotTerminalNotUnavailable(t *testing.T) {
	c := newTestClient(t, func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusInternalServerError)
		_, _ = io.WriteString(w, rayDeleteRunning)
	})
	_, err := c.DeleteJob(context.Background(), "job-1")
	if !errors.Is(err, ErrJobNotTerminal) || errors.Is(err, ErrUnavailable) {
		t.Fatalf("DeleteJob = %v, want ErrJobNotTerminal and not ErrUnavailable", err)
	}
}
