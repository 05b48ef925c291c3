// Package bench is Manta's benchmark harness: `make bench` runs it. Each benchmark starts its own dev cluster
// (internal/devcluster), runs the operator in-process with a counting transport, drives a scenario and reports
// durations, API calls and memory with b.ReportMetric, plus a readable summary (with KubeRay's published figures
// next to Manta's where there are any) through b.Logf. See README.md.
package bench
