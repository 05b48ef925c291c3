// Package reliability holds the reliability tests: the operator killed and restarted, leader failover, a faulty
// API server, a faulty Ray head, hostile input and load. They run on one dev cluster (internal/devcluster) with
// the operator as a separate process, the real `manta operator` built from ./cmd/manta (operator_process_test.go),
// that the tests SIGKILL and SIGTERM. It runs with --use-kubernetes-proxy against an in-test API proxy, which
// answers the Ray heads' proxy subresources from a fake Ray that counts every submission and Serve deploy, since
// the dev cluster's pods run no Ray. Every create and delete of a Ray pod is watched (podLedger), so a
// duplicate or a wrongful delete is seen however briefly it lived.
//
// Knobs: MANTA_RELIABILITY_SEED replays a run's random choices (each test logs its seed);
// MANTA_RELIABILITY_LOGS=<dir> keeps the operator processes' logs; MANTA_RELIABILITY_LOAD_SECONDS=30 holds the
// REST load for the full 30 s (10 s in make test).
package reliability
