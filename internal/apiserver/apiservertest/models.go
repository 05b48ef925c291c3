package apiservertest

import "github.com/manta-dev/manta/internal/apiserver"

// Template is a compute template of 2 CPUs and 4 GiB.
func Template(ns, name string) apiserver.ComputeTemplate {
	return apiserver.ComputeTemplate{Name: name, Namespace: ns, CPU: 2, Memory: 4}
}

// Cluster is a valid cluster whose head and one worker group use the compute template "small".
func Cluster(ns, name string) apiserver.Cluster {
	return apiserver.Cluster{
		Name: name, Namespace: ns, User: "alice", Version: "2.52.0",
		ClusterSpec: &apiserver.ClusterSpec{
			HeadGroupSpec: &apiserver.HeadGroupSpec{ComputeTemplate: "small", RayStartParams: map[string]string{"dashboard-host": "0.0.0.0"}},
			WorkerGroupSpec: []apiserver.WorkerGroupSpec{{
				GroupName: "workers", ComputeTemplate: "small", Replicas: 1, MinReplicas: 0, MaxReplicas: 3,
				RayStartParams: map[string]string{"num-cpus": "2"},
			}},
		},
	}
}

// Job is a valid job on Cluster's spec.
func Job(ns, name string) apiserver.RayJob {
	c := Cluster(ns, name)
	return apiserver.RayJob{Name: name, Namespace: ns, User: "bob", Version: "2.52.0", Entrypoint: "python -c 'print(1)'", ClusterSpec: c.ClusterSpec}
}

// Service is a valid service of one Serve application on Cluster's spec.
func Service(ns, name string) apiserver.RayService {
	c := Cluster(ns, name)
	return apiserver.RayService{Name: name, Namespace: ns, User: "carol", Version: "2.52.0",
		ServeConfigV2: "applications:\n  - name: app\n    import_path: app:deployment\n", ClusterSpec: c.ClusterSpec}
}
