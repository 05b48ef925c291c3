package reconcile

import "k8s.io/utils/clock"

// Clock is the only time a controller reads (see the package doc).
type Clock = clock.PassiveClock

// RealClock is the operator's clock.
var RealClock Clock = clock.RealClock{}
