// Package reliability holds the tests of issue 14: the operator killed and restarted, leader failover, a faulty
// API server, a faulty Ray head, hostile input and load. They run on one dev cluster (internal/devcluster) with
// the operator as a separate process (this test binary re-executed as `manta operator`, see TestMain) that the
// tests SIGKILL; Ray heads are played by an in-test HTTP server that counts every submission and Serve deploy,
// since the dev cluster's pods run no Ray. Every create and delete of a Ray pod is watched (podLedger), so a
// duplicate or a wrongful delete is seen however briefly it lived.
//
// Knobs: MANTA_RELIABILITY_SEED replays a run's random choices (each test logs its seed);
// MANTA_RELIABILITY_LOGS=<dir> keeps the operator processes' logs; MANTA_RELIABILITY_LOAD_SECONDS=30 holds the
// REST load for the full 30 s (10 s in make test).
package reliability
