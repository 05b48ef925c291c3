package operator

// The API groups and controllers the operator runs. Each controller package exposes a constructor and
// SetupWithManager; this is the one list that wires them in.
func init() {
}
