// Package reliability holds the tests of issue 14: the operator killed and restarted, leader failover, a faulty
// API server, a faulty Ray head, hostile input and load. They run on the dev cluster (internal/devcluster) with
// the operator as a separate process that the tests SIGKILL; Ray heads are played by an in-test HTTP server that
// counts every submission, since the dev cluster's pods run no Ray.
package reliability
