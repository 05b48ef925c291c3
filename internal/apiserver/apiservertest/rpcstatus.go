package apiservertest

import (
	"testing"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	statuspb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/protobuf/encoding/protojson"
)

// RPCStatus is a decoded google.rpc.Status with its BadRequest detail unpacked.
type RPCStatus struct {
	*statuspb.Status
	badRequest *errdetails.BadRequest
}

// GetFieldViolations is the BadRequest detail's field violations (none without the detail).
func (s RPCStatus) GetFieldViolations() []*errdetails.BadRequest_FieldViolation {
	return s.badRequest.GetFieldViolations()
}

// DecodeRPCStatus decodes an error body the way KubeRay's Go client does: protojson into google.rpc.Status, whose
// details are Any messages resolved from the global registry (errdetails registers google.rpc.BadRequest).
func DecodeRPCStatus(t *testing.T, body []byte) RPCStatus {
	t.Helper()
	var st statuspb.Status
	if err := protojson.Unmarshal(body, &st); err != nil {
		t.Fatalf("protojson cannot decode the error body as google.rpc.Status: %v\n%s", err, body)
	}
	out := RPCStatus{Status: &st}
	for _, d := range st.GetDetails() {
		var br errdetails.BadRequest
		if err := d.UnmarshalTo(&br); err != nil {
			t.Fatalf("detail %s is not a google.rpc.BadRequest: %v", d.GetTypeUrl(), err)
		}
		out.badRequest = &br
	}
	return out
}
