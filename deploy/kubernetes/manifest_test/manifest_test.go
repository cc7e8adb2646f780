// Package manifest_test decodes every manifest of deploy/kubernetes strictly
// against the Kubernetes API types (unknown or duplicate fields fail) and
// checks that they fit together: the StatefulSet's headless Service, probes,
// Secrets and PodDisruptionBudget, candidate names and URLs built from the
// pods' stable DNS names, and TLS: a certificate per pod naming it, HTTPS
// probes and URLs, the CA key kept from the serving container. It is a module of its own so that elanous-node
// does not depend on k8s.io/api. Run it with
//
//	cd deploy/kubernetes/manifest_test && go test ./...
package manifest_test

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/yaml"
)

// object is one decoded manifest document.
type object struct {
	file string
	obj  any
}

// newObject returns an empty typed object for apiVersion and kind.
func newObject(tm metav1.TypeMeta) (any, error) {
	switch tm.APIVersion + "/" + tm.Kind {
	case "v1/Namespace":
		return &corev1.Namespace{}, nil
	case "v1/ConfigMap":
		return &corev1.ConfigMap{}, nil
	case "v1/Service":
		return &corev1.Service{}, nil
	case "apps/v1/StatefulSet":
		return &appsv1.StatefulSet{}, nil
	case "policy/v1/PodDisruptionBudget":
		return &policyv1.PodDisruptionBudget{}, nil
	}
	return nil, fmt.Errorf("unexpected apiVersion %q kind %q", tm.APIVersion, tm.Kind)
}

var docSeparator = regexp.MustCompile(`(?m)^---[ \t]*$`)

// loadManifests decodes every document of every *.yaml file in deploy/kubernetes.
func loadManifests(t *testing.T) []object {
	t.Helper()
	files, err := filepath.Glob(filepath.Join("..", "*.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if len(files) == 0 {
		t.Fatal("no manifests in deploy/kubernetes")
	}
	var objs []object
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for i, doc := range docSeparator.Split(string(data), -1) {
			if strings.TrimSpace(stripComments(doc)) == "" {
				continue
			}
			var tm metav1.TypeMeta
			if err := yaml.Unmarshal([]byte(doc), &tm); err != nil {
				t.Errorf("%s document %d: %v", f, i, err)
				continue
			}
			obj, err := newObject(tm)
			if err != nil {
				t.Errorf("%s document %d: %v", f, i, err)
				continue
			}
			if err := yaml.UnmarshalStrict([]byte(doc), obj); err != nil {
				t.Errorf("%s document %d (%s): strict decode: %v", f, i, tm.Kind, err)
				continue
			}
			objs = append(objs, object{file: filepath.Base(f), obj: obj})
		}
	}
	return objs
}

func stripComments(doc string) string {
	var b strings.Builder
	for _, line := range strings.Split(doc, "\n") {
		if !strings.HasPrefix(strings.TrimSpace(line), "#") {
			b.WriteString(line + "\n")
		}
	}
	return b.String()
}

func only[T any](t *testing.T, objs []object, name string) T {
	t.Helper()
	var found []T
	for _, o := range objs {
		if v, ok := o.obj.(T); ok {
			if m, ok := any(v).(metav1.Object); ok && (name == "" || m.GetName() == name) {
				found = append(found, v)
			}
		}
	}
	if len(found) != 1 {
		var zero T
		t.Fatalf("found %d %T named %q, want 1", len(found), zero, name)
	}
	return found[0]
}

func TestManifests_DecodeStrictly(t *testing.T) {
	objs := loadManifests(t)
	ns := only[*corev1.Namespace](t, objs, "")
	for _, o := range objs {
		m := o.obj.(metav1.Object)
		if _, isNS := o.obj.(*corev1.Namespace); !isNS && m.GetNamespace() != ns.Name {
			t.Errorf("%s: %s is in namespace %q, want %q", o.file, m.GetName(), m.GetNamespace(), ns.Name)
		}
	}
}

func TestManifests_StatefulSet(t *testing.T) {
	objs := loadManifests(t)
	sts := only[*appsv1.StatefulSet](t, objs, "")
	spec := sts.Spec
	if spec.Replicas == nil || *spec.Replicas != 3 {
		t.Errorf("replicas = %v, want 3", spec.Replicas)
	}
	if spec.PodManagementPolicy != appsv1.ParallelPodManagement {
		t.Errorf("podManagementPolicy = %q, want Parallel (a candidate is ready only once a quorum runs)", spec.PodManagementPolicy)
	}
	sel, err := metav1.LabelSelectorAsSelector(spec.Selector)
	if err != nil {
		t.Fatal(err)
	}
	podLabels := labels.Set(spec.Template.Labels)
	if !sel.Matches(podLabels) {
		t.Errorf("selector %v does not match the pod labels %v", sel, podLabels)
	}

	// The headless Service names the pods, before they are ready.
	svc := only[*corev1.Service](t, objs, spec.ServiceName)
	if svc.Spec.ClusterIP != corev1.ClusterIPNone {
		t.Errorf("service %s clusterIP = %q, want None (headless)", svc.Name, svc.Spec.ClusterIP)
	}
	if !svc.Spec.PublishNotReadyAddresses {
		t.Errorf("service %s does not publish not-ready addresses: candidates could not find each other to become ready", svc.Name)
	}
	if !labels.SelectorFromSet(svc.Spec.Selector).Matches(podLabels) {
		t.Errorf("service %s selector %v does not match the pods", svc.Name, svc.Spec.Selector)
	}

	pod := spec.Template.Spec
	sc := pod.SecurityContext
	if sc == nil || sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot || sc.RunAsUser == nil || *sc.RunAsUser != 65532 {
		t.Errorf("pod securityContext = %+v, want runAsNonRoot and runAsUser 65532", sc)
	}
	if len(pod.Containers) != 1 {
		t.Fatalf("%d containers, want 1", len(pod.Containers))
	}
	c := pod.Containers[0]
	ports := map[string]int32{}
	for _, p := range c.Ports {
		ports[p.Name] = p.ContainerPort
	}
	if ports["http"] != 31413 || ports["raft"] != 31412 {
		t.Errorf("container ports = %v, want http 31413 and raft 31412", ports)
	}
	probes := []struct {
		name  string
		probe *corev1.Probe
		path  string
	}{{"liveness", c.LivenessProbe, "/v1/health"}, {"readiness", c.ReadinessProbe, "/v1/ready"}}
	for _, p := range probes {
		if p.probe == nil || p.probe.HTTPGet == nil {
			t.Errorf("%s probe is not an HTTP GET", p.name)
			continue
		}
		g := p.probe.HTTPGet
		if g.Path != p.path || g.Port.String() != "http" || g.Scheme != corev1.URISchemeHTTPS {
			t.Errorf("%s probe = %s GET %s on %s, want HTTPS GET %s on http", p.name, g.Scheme, g.Path, g.Port.String(), p.path)
		}
	}
	if csc := c.SecurityContext; csc == nil || csc.ReadOnlyRootFilesystem == nil || !*csc.ReadOnlyRootFilesystem ||
		csc.AllowPrivilegeEscalation == nil || *csc.AllowPrivilegeEscalation {
		t.Errorf("container securityContext = %+v, want a read-only root and no privilege escalation", csc)
	}

	// Secrets: the tokens and the CA, both required.
	secrets := map[string]*corev1.SecretVolumeSource{}
	for _, v := range pod.Volumes {
		if v.Secret != nil {
			secrets[v.Name] = v.Secret
		}
	}
	for volume, secret := range map[string]string{"tokens": "elanous-tokens", "ca": "elanous-ca"} {
		if s := secrets[volume]; s == nil || s.SecretName != secret || (s.Optional != nil && *s.Optional) {
			t.Errorf("%s volume = %+v, want the required Secret %s", volume, s, secret)
		}
	}
	if ic := initContainer(pod, "install-tokens"); ic == nil ||
		!strings.Contains(strings.Join(ic.Command, " "), "init --force --from /etc/elanous/secrets/tokens.json") {
		t.Errorf("init containers = %+v, want install-tokens installing the tokens Secret with init --from", pod.InitContainers)
	}
}

// initContainer returns the pod's init container called name, or nil.
func initContainer(pod corev1.PodSpec, name string) *corev1.Container {
	for i := range pod.InitContainers {
		if pod.InitContainers[i].Name == name {
			return &pod.InitContainers[i]
		}
	}
	return nil
}

// mountPath returns where c mounts volume, or "".
func mountPath(c corev1.Container, volume string) string {
	for _, m := range c.VolumeMounts {
		if m.Name == volume {
			return m.MountPath
		}
	}
	return ""
}

// envMap returns c's environment variables with literal values.
func envMap(c corev1.Container) map[string]string {
	env := map[string]string{}
	for _, e := range c.Env {
		env[e.Name] = e.Value
	}
	return env
}

// flagValues returns every value of --name in args ("--name", "value").
func flagValues(args []string, name string) []string {
	var vals []string
	for i := 0; i+1 < len(args); i++ {
		if args[i] == "--"+name {
			vals = append(vals, args[i+1])
		}
	}
	return vals
}

// elanousConfig is the part of elanous.yaml the checks read.
type elanousConfig struct {
	Cluster struct {
		Candidates []struct{ Machine, URL, Raft string } `json:"candidates"`
	} `json:"cluster"`
	TLS map[string]any `json:"tls"`
}

// loadConfig returns the StatefulSet and the elanous.yaml of its ConfigMap.
func loadConfig(t *testing.T) (*appsv1.StatefulSet, elanousConfig) {
	t.Helper()
	objs := loadManifests(t)
	sts := only[*appsv1.StatefulSet](t, objs, "")
	var cfgName string
	for _, v := range sts.Spec.Template.Spec.Volumes {
		if v.ConfigMap != nil {
			cfgName = v.ConfigMap.Name
		}
	}
	cm := only[*corev1.ConfigMap](t, objs, cfgName)
	var cfg elanousConfig
	if err := yaml.Unmarshal([]byte(cm.Data["elanous.yaml"]), &cfg); err != nil {
		t.Fatalf("configmap %s elanous.yaml: %v", cm.Name, err)
	}
	return sts, cfg
}

func TestManifests_CandidatesFromStableDNSNames(t *testing.T) {
	sts, cfg := loadConfig(t)
	ns := sts.Namespace
	cands := cfg.Cluster.Candidates
	if len(cands) != int(*sts.Spec.Replicas) {
		t.Fatalf("%d candidates, want one per replica (%d)", len(cands), *sts.Spec.Replicas)
	}
	env := envMap(sts.Spec.Template.Spec.Containers[0])
	for i, c := range cands {
		pod := fmt.Sprintf("%s-%d", sts.Name, i)
		host := fmt.Sprintf("%s.%s.%s.svc", pod, sts.Spec.ServiceName, ns)
		want := struct{ Machine, URL, Raft string }{pod, "https://" + host + ":31413", host + ":31412"}
		if c != want {
			t.Errorf("candidate %d = %+v, want %+v (the pod's stable DNS name)", i, c, want)
		}
		// What each pod advertises is its candidate entry.
		expand := func(s string) string { return strings.ReplaceAll(s, "$(POD_NAME)", pod) }
		if got := expand(env["ELANOUS_NODE_ID"]); got != c.Machine {
			t.Errorf("pod %s: ELANOUS_NODE_ID = %q, want %q", pod, got, c.Machine)
		}
		if got := expand(env["ELANOUS_HTTP_ADVERTISE"]); got != c.URL {
			t.Errorf("pod %s: ELANOUS_HTTP_ADVERTISE = %q, want %q", pod, got, c.URL)
		}
		if got := expand(env["ELANOUS_RAFT_ADVERTISE"]); got != c.Raft {
			t.Errorf("pod %s: ELANOUS_RAFT_ADVERTISE = %q, want %q", pod, got, c.Raft)
		}
	}
}

// Each pod runs TLS with a certificate of its own: the issue-cert init
// container issues it from the CA Secret, naming the pod and its stable DNS
// name, into a volume the serving container reads through ELANOUS_TLS_*; the
// CA key is mounted in issue-cert only; nothing allows plaintext.
func TestManifests_TLS(t *testing.T) {
	sts, cfg := loadConfig(t)
	pod := sts.Spec.Template.Spec
	serving := pod.Containers[0]

	if v, ok := cfg.TLS["allow_plaintext"]; ok {
		t.Errorf("elanous.yaml tls.allow_plaintext = %v, want it absent", v)
	}
	for i, c := range cfg.Cluster.Candidates {
		if !strings.HasPrefix(c.URL, "https://") {
			t.Errorf("candidate %d url %q, want https://", i, c.URL)
		}
	}

	ic := initContainer(pod, "issue-cert")
	if ic == nil {
		t.Fatalf("no issue-cert init container issuing each pod's certificate (init containers %+v)", pod.InitContainers)
	}
	args := ic.Command
	if len(args) < 3 || args[1] != "tls" || args[2] != "cert" || !slices.Contains(args, "--with-ca") {
		t.Errorf("issue-cert runs %v, want elanous-node tls cert --with-ca", args)
	}
	caDir, out := flagValues(args, "ca-dir"), flagValues(args, "out")
	if len(caDir) != 1 || caDir[0] != mountPath(*ic, "ca") || len(out) != 1 || out[0] != mountPath(*ic, "tls") {
		t.Errorf("issue-cert --ca-dir %v --out %v, want the ca volume's mount (%q) and the tls volume's (%q)",
			caDir, out, mountPath(*ic, "ca"), mountPath(*ic, "tls"))
	}
	dir := mountPath(serving, "tls")
	if dir == "" || len(out) != 1 || dir != out[0] {
		t.Fatalf("serving container mounts the tls volume at %q, want where issue-cert writes (%v)", dir, out)
	}

	// The CA key: only in issue-cert; the pod's files: in memory.
	containers := append(slices.Clone(pod.InitContainers), pod.Containers...)
	for _, c := range containers {
		if c.Name != "issue-cert" && mountPath(c, "ca") != "" {
			t.Errorf("container %s mounts the CA Secret (ca-key.pem), want only issue-cert to", c.Name)
		}
	}
	for _, v := range pod.Volumes {
		if v.Name == "tls" && (v.EmptyDir == nil || v.EmptyDir.Medium != corev1.StorageMediumMemory) {
			t.Errorf("tls volume = %+v, want a memory-backed emptyDir", v.VolumeSource)
		}
	}

	// Per pod: the certificate names the pod and its stable DNS name, and
	// tls.* name the files issue-cert wrote for it.
	env := envMap(serving)
	if !slices.ContainsFunc(ic.Env, func(e corev1.EnvVar) bool {
		return e.Name == "POD_NAME" && e.ValueFrom != nil && e.ValueFrom.FieldRef != nil && e.ValueFrom.FieldRef.FieldPath == "metadata.name"
	}) {
		t.Error("issue-cert has no POD_NAME from metadata.name to name the pod's certificate")
	}
	if got := cfg.TLS["ca_file"]; got != dir+"/ca.pem" && env["ELANOUS_TLS_CA_FILE"] != dir+"/ca.pem" {
		t.Errorf("tls.ca_file = %v (ELANOUS_TLS_CA_FILE %q), want %s/ca.pem", got, env["ELANOUS_TLS_CA_FILE"], dir)
	}
	for i := 0; i < int(*sts.Spec.Replicas); i++ {
		podName := fmt.Sprintf("%s-%d", sts.Name, i)
		expand := func(s string) string { return strings.ReplaceAll(s, "$(POD_NAME)", podName) }
		var expanded []string
		for _, a := range args {
			expanded = append(expanded, expand(a))
		}
		host := fmt.Sprintf("%s.%s.%s.svc", podName, sts.Spec.ServiceName, sts.Namespace)
		if m := flagValues(expanded, "machine"); len(m) != 1 || m[0] != podName {
			t.Errorf("pod %s: issue-cert --machine %v, want %s (the name the Raft transport checks)", podName, m, podName)
		}
		if !slices.Contains(flagValues(expanded, "dns"), host) {
			t.Errorf("pod %s: issue-cert --dns %v, want its stable DNS name %s", podName, flagValues(expanded, "dns"), host)
		}
		cert, key := expand(env["ELANOUS_TLS_CERT_FILE"]), expand(env["ELANOUS_TLS_KEY_FILE"])
		if cert != dir+"/"+podName+".pem" || key != dir+"/"+podName+"-key.pem" {
			t.Errorf("pod %s: ELANOUS_TLS_CERT_FILE %q, ELANOUS_TLS_KEY_FILE %q, want %s/%s.pem and %s/%s-key.pem",
				podName, cert, key, dir, podName, dir, podName)
		}
	}
}

func TestManifests_PodDisruptionBudgetKeepsQuorum(t *testing.T) {
	objs := loadManifests(t)
	sts := only[*appsv1.StatefulSet](t, objs, "")
	pdb := only[*policyv1.PodDisruptionBudget](t, objs, "")
	sel, err := metav1.LabelSelectorAsSelector(pdb.Spec.Selector)
	if err != nil {
		t.Fatal(err)
	}
	if !sel.Matches(labels.Set(sts.Spec.Template.Labels)) {
		t.Errorf("PDB selector %v does not match the candidates", sel)
	}
	replicas := int(*sts.Spec.Replicas)
	quorum := replicas/2 + 1
	switch {
	case pdb.Spec.MaxUnavailable != nil:
		if got := pdb.Spec.MaxUnavailable.IntValue(); got < 1 || replicas-got < quorum {
			t.Errorf("PDB maxUnavailable = %d: %d of %d candidates left, want a quorum of %d", got, replicas-got, replicas, quorum)
		}
	case pdb.Spec.MinAvailable != nil:
		if got := pdb.Spec.MinAvailable.IntValue(); got < quorum || got >= replicas {
			t.Errorf("PDB minAvailable = %d, want at least a quorum (%d) and fewer than %d", got, quorum, replicas)
		}
	default:
		t.Error("PDB sets neither maxUnavailable nor minAvailable")
	}
}
