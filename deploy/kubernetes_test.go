package deploy

import (
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
	kjson "sigs.k8s.io/json"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/api/types"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	"sigs.k8s.io/yaml"
)

// The names the Kubernetes base and its documentation share.
const (
	// secretName is the Secret the base reads; its keys are the names of
	// the flags they set (store, redis-url, postgres-url, auth-token).
	secretName = "outboxd"
	// serviceAccountName is the identity of every outboxd pod.
	serviceAccountName = "outboxd"
	// imageName is the last element of the image every container runs.
	imageName = "outboxd"
	// lagMetric is the gauge the KEDA example scales the workers on.
	lagMetric = "outboxd_stream_lag"
)

// The overlays the tests render: the base alone and with its components,
// as a user's overlay would use them.
var overlays = map[string][]string{
	"base": nil,
	"keda": {"keda-work"},
	"hpa":  {"hpa-ingest"},
	"all":  {"keda-work", "hpa-ingest"},
}

// scaledObject is the part of KEDA's ScaledObject (keda.sh/v1alpha1, a
// CRD) that the component uses, decoded strictly: a field outside it fails.
type scaledObject struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata"`
	Spec              struct {
		ScaleTargetRef struct {
			APIVersion string `json:"apiVersion,omitempty"`
			Kind       string `json:"kind,omitempty"`
			Name       string `json:"name"`
		} `json:"scaleTargetRef"`
		PollingInterval *int32 `json:"pollingInterval,omitempty"`
		CooldownPeriod  *int32 `json:"cooldownPeriod,omitempty"`
		MinReplicaCount *int32 `json:"minReplicaCount,omitempty"`
		MaxReplicaCount *int32 `json:"maxReplicaCount,omitempty"`
		Fallback        *struct {
			FailureThreshold int32 `json:"failureThreshold"`
			Replicas         int32 `json:"replicas"`
		} `json:"fallback,omitempty"`
		Advanced *struct {
			HorizontalPodAutoscalerConfig *struct {
				Behavior *autoscalingv2.HorizontalPodAutoscalerBehavior `json:"behavior,omitempty"`
			} `json:"horizontalPodAutoscalerConfig,omitempty"`
		} `json:"advanced,omitempty"`
		Triggers []struct {
			Type     string            `json:"type"`
			Name     string            `json:"name,omitempty"`
			Metadata map[string]string `json:"metadata"`
		} `json:"triggers"`
	} `json:"spec"`
}

// prometheusTrigger is the metadata of KEDA's prometheus scaler (its
// documented keys; KEDA itself ignores a misspelt one).
type prometheusTrigger struct {
	ServerAddress       string `json:"serverAddress"`
	Query               string `json:"query"`
	Threshold           string `json:"threshold"`
	ActivationThreshold string `json:"activationThreshold,omitempty"`
	Namespace           string `json:"namespace,omitempty"`
	CustomHeaders       string `json:"customHeaders,omitempty"`
	IgnoreNullValues    string `json:"ignoreNullValues,omitempty"`
	QueryParameters     string `json:"queryParameters,omitempty"`
	UnsafeSsl           string `json:"unsafeSsl,omitempty"`
	Timeout             string `json:"timeout,omitempty"`
}

// objects are the rendered objects of one kustomization, by type.
type objects struct {
	serviceAccounts []*corev1.ServiceAccount
	services        []*corev1.Service
	deployments     []*appsv1.Deployment
	jobs            []*batchv1.Job
	cronJobs        []*batchv1.CronJob
	pdbs            []*policyv1.PodDisruptionBudget
	hpas            []*autoscalingv2.HorizontalPodAutoscaler
	scaledObjects   []*scaledObject
}

// decodeObjects decodes each document of a rendered kustomization strictly
// into its API type: an unknown field, a wrong type or an unknown kind
// fails.
func decodeObjects(rendered []byte) (*objects, error) {
	o := &objects{}
	for _, doc := range bytes.Split(rendered, []byte("\n---\n")) {
		var tm metav1.TypeMeta
		if err := yaml.Unmarshal(doc, &tm); err != nil {
			return nil, err
		}
		var name struct {
			Metadata struct{ Name string } `json:"metadata"`
		}
		_ = yaml.Unmarshal(doc, &name)
		var target any
		switch tm.APIVersion + " " + tm.Kind {
		case "v1 ServiceAccount":
			target = appendNew(&o.serviceAccounts)
		case "v1 Service":
			target = appendNew(&o.services)
		case "apps/v1 Deployment":
			target = appendNew(&o.deployments)
		case "batch/v1 Job":
			target = appendNew(&o.jobs)
		case "batch/v1 CronJob":
			target = appendNew(&o.cronJobs)
		case "policy/v1 PodDisruptionBudget":
			target = appendNew(&o.pdbs)
		case "autoscaling/v2 HorizontalPodAutoscaler":
			target = appendNew(&o.hpas)
		case "keda.sh/v1alpha1 ScaledObject":
			target = appendNew(&o.scaledObjects)
		default:
			return nil, fmt.Errorf("%s %s: no API type to check it against (apiVersion %q, kind %q)", tm.Kind, name.Metadata.Name, tm.APIVersion, tm.Kind)
		}
		if err := strictDecode(doc, target); err != nil {
			return nil, fmt.Errorf("%s %s: %w", tm.Kind, name.Metadata.Name, err)
		}
	}
	return o, nil
}

// strictDecode decodes a YAML document as the API server does under
// kubectl's strict field validation: YAML to JSON with no regard to the
// target (a number stays a number), then case-sensitive JSON in which an
// unknown or a duplicate field is an error.
func strictDecode(doc []byte, v any) error {
	j, err := yaml.YAMLToJSONStrict(doc)
	if err != nil {
		return err
	}
	strictErrs, err := kjson.UnmarshalStrict(j, v)
	if err != nil {
		return err
	}
	return errors.Join(strictErrs...)
}

func appendNew[T any](list *[]*T) *T {
	v := new(T)
	*list = append(*list, v)
	return v
}

// kubeTree is the files of deploy/kubernetes, by path relative to it.
type kubeTree map[string]string

func readKubeTree(t *testing.T) kubeTree {
	t.Helper()
	tree := kubeTree{}
	err := filepath.WalkDir("kubernetes", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel("kubernetes", p)
		tree[filepath.ToSlash(rel)] = string(b)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return tree
}

// render runs Kustomize on the tree in memory: the base at /kubernetes, or
// an overlay of it with the named components.
func (tree kubeTree) render(overlay string) ([]byte, error) {
	fsys := filesys.MakeFsInMemory()
	for p, content := range tree {
		if err := fsys.WriteFile("/kubernetes/"+p, []byte(content)); err != nil {
			return nil, err
		}
	}
	dir := "/kubernetes"
	if comps := overlays[overlay]; len(comps) > 0 {
		dir = "/overlays/" + overlay
		k := "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources: [../../kubernetes]\ncomponents:\n"
		for _, c := range comps {
			k += "  - ../../kubernetes/components/" + c + "\n"
		}
		if err := fsys.WriteFile(dir+"/kustomization.yaml", []byte(k)); err != nil {
			return nil, err
		}
	}
	rm, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(fsys, dir)
	if err != nil {
		return nil, err
	}
	return rm.AsYaml()
}

// checkTree checks that every manifest of the tree is used: listed by a
// kustomization (a resource, a patch or a component), so no file escapes
// both `kubectl apply -k` and this test.
func (tree kubeTree) checkTree() []error {
	var errs []error
	used := map[string]bool{}
	for p, content := range tree {
		if path.Base(p) != "kustomization.yaml" {
			continue
		}
		var k types.Kustomization
		if err := k.Unmarshal([]byte(content)); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", p, err))
			continue
		}
		dir := path.Dir(p)
		refs := slices.Concat(k.Resources, k.Components)
		for _, patch := range k.Patches {
			refs = append(refs, patch.Path)
		}
		for _, r := range refs {
			if r != "" {
				used[path.Join(dir, r)] = true
			}
		}
	}
	for p := range tree {
		if strings.HasSuffix(p, ".yaml") && path.Base(p) != "kustomization.yaml" && !used[p] {
			errs = append(errs, fmt.Errorf("%s is not listed by any kustomization: kubectl apply -k would skip it", p))
		}
	}
	return errs
}

// workload is a Deployment, Job or CronJob with its outboxd container
// resolved against the role's flags.
type workload struct {
	kind, name string
	template   *corev1.PodTemplateSpec
	replicas   *int32
	selector   *metav1.LabelSelector
	res        *resolved
	port       int
}

func (w *workload) where() string { return w.kind + " " + w.name }

// check holds rendered objects to the rules of docs/deploy.md.
type check struct {
	o         *objects
	workloads []*workload
	// scaled are the Deployments an autoscaler sets the replicas of, with
	// the autoscaler's minimum.
	scaled map[string]int32
	errs   []error
}

func (c *check) fail(format string, a ...any) { c.errs = append(c.errs, fmt.Errorf(format, a...)) }

// checkObjects runs every check on o.
func checkObjects(o *objects) []error {
	c := &check{o: o, scaled: map[string]int32{}}
	c.autoscalers()
	c.collectWorkloads()
	for _, w := range c.workloads {
		c.pod(w)
	}
	c.roles()
	c.selectors()
	c.services()
	c.disruptionBudgets()
	return c.errs
}

func (c *check) collectWorkloads() {
	for _, d := range c.o.deployments {
		c.workloads = append(c.workloads, &workload{kind: "Deployment", name: d.Name, template: &d.Spec.Template, replicas: d.Spec.Replicas, selector: d.Spec.Selector})
	}
	for _, j := range c.o.jobs {
		c.workloads = append(c.workloads, &workload{kind: "Job", name: j.Name, template: &j.Spec.Template, selector: j.Spec.Selector})
	}
	for _, j := range c.o.cronJobs {
		c.workloads = append(c.workloads, &workload{kind: "CronJob", name: j.Name, template: &j.Spec.JobTemplate.Spec.Template})
	}
}

// pod checks a workload's pod: identity, security, and its one outboxd
// container.
func (c *check) pod(w *workload) {
	spec := &w.template.Spec
	where := w.where()
	if spec.ServiceAccountName != serviceAccountName || !slices.ContainsFunc(c.o.serviceAccounts, func(sa *corev1.ServiceAccount) bool { return sa.Name == serviceAccountName }) {
		c.fail("%s: serviceAccountName must be %s, a ServiceAccount of the base (got %q)", where, serviceAccountName, spec.ServiceAccountName)
	}
	if spec.AutomountServiceAccountToken == nil || *spec.AutomountServiceAccountToken {
		c.fail("%s: automountServiceAccountToken must be false: outboxd never calls the Kubernetes API", where)
	}
	if spec.EnableServiceLinks == nil || *spec.EnableServiceLinks {
		c.fail("%s: enableServiceLinks must be false: a Service named outboxd-… would add OUTBOXD_* variables", where)
	}
	if len(spec.InitContainers) > 0 || len(spec.Containers) != 1 {
		c.fail("%s: the pod must have exactly one container, outboxd (got %d, and %d init containers)", where, len(spec.Containers), len(spec.InitContainers))
	}
	for i := range spec.Containers {
		c.container(w, &spec.Containers[i])
	}
	switch w.kind {
	case "Deployment":
		if w.res != nil && !w.res.longRunning() {
			c.fail("%s: outboxd %s exits when it is done, and a Deployment would start it again and again: run it as a Job", where, strings.Join(w.res.inv.args, " "))
		}
	default:
		if p := spec.RestartPolicy; p != corev1.RestartPolicyNever && p != corev1.RestartPolicyOnFailure {
			c.fail("%s: restartPolicy must be Never or OnFailure (got %q)", where, p)
		}
		if w.res != nil && w.res.longRunning() {
			c.fail("%s: outboxd %s runs until it is stopped: a %s never completes; run it as a Deployment", where, w.res.role, w.kind)
		}
	}
}

// container checks one container of a workload's pod.
func (c *check) container(w *workload, ct *corev1.Container) {
	where := fmt.Sprintf("%s container %s", w.where(), ct.Name)
	pod := w.template.Spec.SecurityContext
	if pod == nil {
		pod = &corev1.PodSecurityContext{}
	}
	sc := ct.SecurityContext
	if sc == nil {
		sc = &corev1.SecurityContext{}
	}
	// Security: the container's setting wins over the pod's.
	runAsNonRoot := cmpPtr(sc.RunAsNonRoot, pod.RunAsNonRoot)
	if runAsNonRoot == nil || !*runAsNonRoot {
		c.fail("%s: runAsNonRoot must be true", where)
	}
	if uid := cmpPtr(sc.RunAsUser, pod.RunAsUser); uid != nil && *uid != imageUID {
		c.fail("%s: runAsUser must be the image's user %d (got %d)", where, imageUID, *uid)
	}
	if sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem {
		c.fail("%s: readOnlyRootFilesystem must be true", where)
	}
	if sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation {
		c.fail("%s: allowPrivilegeEscalation must be false", where)
	}
	if sc.Privileged != nil && *sc.Privileged {
		c.fail("%s: must not be privileged", where)
	}
	if sc.Capabilities == nil || !slices.Contains(sc.Capabilities.Drop, "ALL") || len(sc.Capabilities.Add) > 0 {
		c.fail("%s: capabilities must drop ALL and add none", where)
	}
	seccomp := cmpPtr(sc.SeccompProfile, pod.SeccompProfile)
	if seccomp == nil || (seccomp.Type != corev1.SeccompProfileTypeRuntimeDefault && seccomp.Type != corev1.SeccompProfileTypeLocalhost) {
		c.fail("%s: seccompProfile must be RuntimeDefault (or Localhost)", where)
	}

	// The image, run by its entrypoint.
	ref, tag := splitImage(ct.Image)
	if path.Base(ref) != imageName || tag == "" || tag == "latest" {
		c.fail("%s: image %q must be %s with a version tag or digest (kustomize edit set image), not latest", where, ct.Image, imageName)
	}
	if len(ct.Command) > 0 {
		c.fail("%s: command %q replaces the image's entrypoint outboxd: give the role in args", where, ct.Command)
	}

	// Resources from the benchmark's figures (docs/deploy.md).
	for _, name := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
		req, hasReq := ct.Resources.Requests[name]
		lim, hasLim := ct.Resources.Limits[name]
		switch {
		case !hasReq || req.IsZero():
			c.fail("%s: resources.requests.%s must be set", where, name)
		case !hasLim || lim.IsZero():
			c.fail("%s: resources.limits.%s must be set", where, name)
		case req.Cmp(lim) > 0:
			c.fail("%s: resources.requests.%s %s is above its limit %s", where, name, req.String(), lim.String())
		}
	}

	// The environment, and the role's flags.
	inv := invocation{where: where, args: ct.Args}
	if len(ct.EnvFrom) > 0 {
		c.fail("%s: envFrom hides which variables the role gets: list them in env", where)
	}
	goMem := ""
	for _, e := range ct.Env {
		v := envVar{name: e.Name, value: e.Value}
		switch {
		case e.ValueFrom == nil:
		case e.ValueFrom.SecretKeyRef != nil:
			v.source = "secret " + e.ValueFrom.SecretKeyRef.Name + "/" + e.ValueFrom.SecretKeyRef.Key
		default:
			v.source = "a field or config map"
		}
		if e.Name == "GOMEMLIMIT" {
			goMem = e.Value
		}
		inv.env = append(inv.env, v)
	}
	c.goMemLimit(where, goMem, ct.Resources.Limits)
	res, errs := resolve(inv)
	c.errs = append(c.errs, errs...)
	if res == nil {
		return
	}
	w.res = res
	port, errs := res.checkCommon()
	c.errs = append(c.errs, errs...)
	w.port = port
	for _, f := range secretFlags {
		e, ok := res.env[f]
		if ok && e.source != "secret "+secretName+"/"+f {
			c.fail("%s: %s must come from the Secret %s, key %s (valueFrom.secretKeyRef), not %s", where, e.name, secretName, f, cmp.Or(e.source, "a literal value"))
		}
	}
	for _, e := range inv.env {
		if strings.HasPrefix(e.source, "secret ") && !slices.Contains(secretFlags, strings.TrimPrefix(e.source, "secret "+secretName+"/")) {
			c.fail("%s: %s reads %s: the base's Secret is %s with the keys %s", where, e.name, e.source, secretName, strings.Join(secretFlags, ", "))
		}
	}
	if res.longRunning() {
		c.probes(w, ct, port)
		c.grace(w, ct, res)
	}
	c.ingestMemory(where, goMem, res)
}

// The ingest memory model of docs/deploy.md, whose figures come from the
// product module, which this one does not import: the idle heap of an
// ingest process, what one body may cost in multiples of its size
// (httpapi.IngestMemoryPerBody, measured by internal/httpapi's
// TestIngestMemoryAllocations), and the places kept beyond
// --http-max-bodies for the operator and viewer (httpapi.BodyReserveDefault).
const (
	ingestIdleMemory    = 30 << 20
	ingestMemoryPerBody = 5
	ingestBodyReserve   = 8
)

// ingestMemory checks that a role reading ingest bodies fits its
// GOMEMLIMIT: idle + (--http-max-bodies + the reserve) × --max-body ×
// the per-body factor.
func (c *check) ingestMemory(where, goMem string, res *resolved) {
	if !res.has("max-body") || !res.has("http-max-bodies") || goMem == "" {
		return
	}
	limit, err := goMemLimit(goMem)
	if err != nil {
		return // goMemLimit told it
	}
	number := func(flag string) int64 {
		v, ok := res.value(flag)
		n, err := strconv.ParseInt(v, 10, 64)
		if !ok || err != nil {
			c.fail("%s: --%s must be a literal number to check the memory it needs (got %q)", where, flag, v)
		}
		return n
	}
	bodies, maxBody := number("http-max-bodies"), number("max-body")
	if need := ingestIdleMemory + (bodies+ingestBodyReserve)*maxBody*ingestMemoryPerBody; need > limit {
		c.fail("%s: ingest needs up to %d MiB (idle %d MiB + (--http-max-bodies %d + %d reserved) × --max-body %d KiB × %d), more than GOMEMLIMIT %s: lower --http-max-bodies or raise the limit (docs/deploy.md)",
			where, need>>20, ingestIdleMemory>>20, bodies, ingestBodyReserve, maxBody>>10, ingestMemoryPerBody, goMem)
	}
}

// probes checks a long-running role's probes: readiness on /readyz and
// liveness on /healthz, at the port --http-addr serves.
func (c *check) probes(w *workload, ct *corev1.Container, port int) {
	where := fmt.Sprintf("%s container %s", w.where(), ct.Name)
	if !slices.ContainsFunc(ct.Ports, func(p corev1.ContainerPort) bool { return int(p.ContainerPort) == port }) {
		c.fail("%s: no containerPort %d, the port --http-addr serves", where, port)
	}
	for _, p := range []struct {
		what, path string
		probe      *corev1.Probe
		required   bool
	}{
		{"readinessProbe", "/readyz", ct.ReadinessProbe, true},
		{"livenessProbe", "/healthz", ct.LivenessProbe, true},
		{"startupProbe", "/healthz", ct.StartupProbe, false},
	} {
		if p.probe == nil {
			if p.required {
				c.fail("%s: %s must be set (GET %s)", where, p.what, p.path)
			}
			continue
		}
		get := p.probe.HTTPGet
		if get == nil || get.Path != p.path {
			c.fail("%s: %s must GET %s", where, p.what, p.path)
			continue
		}
		if got, ok := containerPort(ct, get.Port); !ok || got != port {
			c.fail("%s: %s probes port %s, but --http-addr serves %d", where, p.what, get.Port.String(), port)
		}
	}
}

// grace checks that the pod of a long-running role is given the time the
// role takes to stop. (A one-shot role stops its work when the signal
// comes.)
func (c *check) grace(w *workload, ct *corev1.Container, res *resolved) {
	where := fmt.Sprintf("%s container %s", w.where(), ct.Name)
	var preStop time.Duration
	if ct.Lifecycle != nil && ct.Lifecycle.PreStop != nil {
		switch h := ct.Lifecycle.PreStop; {
		case h.Exec != nil:
			c.fail("%s: a preStop exec needs a shell or a program the image does not have: use sleep", where)
		case h.Sleep != nil:
			preStop = time.Duration(h.Sleep.Seconds) * time.Second
		}
	}
	need, err := res.graceNeeded(preStop)
	if err != nil {
		c.fail("%s: %v", where, err)
		return
	}
	grace := 30 * time.Second // the Kubernetes default
	if g := w.template.Spec.TerminationGracePeriodSeconds; g != nil {
		grace = time.Duration(*g) * time.Second
	}
	if grace < need {
		c.fail("%s: terminationGracePeriodSeconds %s is shorter than outboxd %s may take to stop (%s: preStop, twice --shutdown-timeout, closing the store)", where, grace, res.role, need)
	}
}

// goMemLimit checks that GOMEMLIMIT is set below the memory limit, so the
// garbage collector works harder before the kernel kills the container.
func (c *check) goMemLimit(where, v string, limits corev1.ResourceList) {
	lim, ok := limits[corev1.ResourceMemory]
	if !ok {
		return
	}
	if v == "" {
		c.fail("%s: GOMEMLIMIT must be set below the memory limit %s", where, lim.String())
		return
	}
	n, err := goMemLimit(v)
	if err != nil {
		c.fail("%s: %v", where, err)
		return
	}
	if n >= lim.Value() {
		c.fail("%s: GOMEMLIMIT %s must be below the memory limit %s", where, v, lim.String())
	}
}

// roles checks that the base runs every role once, in the right kind of
// workload, with the replicas it needs.
func (c *check) roles() {
	byRole := map[string][]*workload{}
	for _, w := range c.workloads {
		if w.res != nil {
			byRole[w.res.role] = append(byRole[w.res.role], w)
		}
	}
	want := []struct {
		role, kind  string
		minReplicas int32
		why         string
	}{
		{"migrate", "Job", 0, ""},
		{"ingest", "Deployment", 2, "so that one serves while the other restarts, and the PodDisruptionBudget lets a node drain"},
		{"dispatch", "Deployment", 2, "the one with the lease relays, the other stands by"},
		{"work", "Deployment", 2, "consumers of one group share the stream"},
		{"reconcile", "", 1, ""},
	}
	for _, r := range want {
		ws := byRole[r.role]
		if len(ws) != 1 {
			c.fail("outboxd %s must run in exactly one workload (found %d)", r.role, len(ws))
			continue
		}
		w := ws[0]
		if r.kind != "" && w.kind != r.kind {
			c.fail("%s: outboxd %s must run as a %s", w.where(), r.role, r.kind)
		}
		if w.kind != "Deployment" {
			continue
		}
		replicas, scaledMin := int32(1), c.scaled[w.name]
		switch {
		case scaledMin > 0 && w.replicas != nil:
			c.fail("%s: an autoscaler sets its replicas, so the manifest must not (kubectl apply would reset them to %d)", w.where(), *w.replicas)
		case scaledMin > 0:
			replicas = scaledMin
		case w.replicas != nil:
			replicas = *w.replicas
		}
		if replicas < r.minReplicas {
			c.fail("%s: replicas %d, at least %d: %s", w.where(), replicas, r.minReplicas, cmp.Or(r.why, "the role must run"))
		}
	}
}

// selectors checks that each workload's selector picks its own pods and no
// other workload's.
func (c *check) selectors() {
	for _, w := range c.workloads {
		if w.selector == nil {
			continue
		}
		sel, err := metav1.LabelSelectorAsSelector(w.selector)
		if err != nil {
			c.fail("%s: selector: %v", w.where(), err)
			continue
		}
		for _, other := range c.workloads {
			matches := sel.Matches(labels.Set(other.template.Labels))
			if other == w && !matches {
				c.fail("%s: its selector does not match its pod template's labels", w.where())
			}
			if other != w && matches {
				c.fail("%s: its selector also matches the pods of %s", w.where(), other.where())
			}
		}
	}
}

// selected returns the workloads whose pods sel matches.
func (c *check) selected(sel labels.Selector) []*workload {
	var out []*workload
	for _, w := range c.workloads {
		if !sel.Empty() && sel.Matches(labels.Set(w.template.Labels)) {
			out = append(out, w)
		}
	}
	return out
}

// services checks that ingest has a Service and that each Service selects
// one workload's pods at ports they serve.
func (c *check) services() {
	ingestServed := false
	for _, s := range c.o.services {
		ws := c.selected(labels.SelectorFromSet(s.Spec.Selector))
		if len(ws) != 1 {
			c.fail("Service %s selects the pods of %d workloads, not one", s.Name, len(ws))
			continue
		}
		w := ws[0]
		if w.res != nil && w.res.role == "ingest" {
			ingestServed = true
		}
		if len(w.template.Spec.Containers) == 0 {
			continue
		}
		ct := &w.template.Spec.Containers[0]
		for _, p := range s.Spec.Ports {
			target := p.TargetPort
			if target.Type == intstr.Int && target.IntVal == 0 {
				target = intstr.FromInt32(p.Port)
			}
			if got, ok := containerPort(ct, target); !ok || got != w.port {
				c.fail("Service %s port %s targets %s, which is not the port %s serves (%d)", s.Name, p.Name, target.String(), w.where(), w.port)
			}
		}
	}
	if !ingestServed {
		c.fail("no Service selects the ingest pods")
	}
}

// disruptionBudgets checks that ingest has a PodDisruptionBudget, that
// each selects one workload, and that none blocks every drain.
func (c *check) disruptionBudgets() {
	ingestCovered := false
	for _, p := range c.o.pdbs {
		sel, err := metav1.LabelSelectorAsSelector(p.Spec.Selector)
		if err != nil {
			c.fail("PodDisruptionBudget %s: %v", p.Name, err)
			continue
		}
		ws := c.selected(sel)
		if len(ws) != 1 {
			c.fail("PodDisruptionBudget %s selects the pods of %d workloads, not one", p.Name, len(ws))
			continue
		}
		w := ws[0]
		if w.res != nil && w.res.role == "ingest" {
			ingestCovered = true
		}
		replicas := cmp.Or(c.scaled[w.name], 1)
		if w.replicas != nil {
			replicas = *w.replicas
		}
		if m := p.Spec.MinAvailable; m != nil && m.Type == intstr.Int && m.IntVal >= replicas {
			c.fail("PodDisruptionBudget %s: minAvailable %d of %d replicas of %s blocks every node drain", p.Name, m.IntVal, replicas, w.where())
		}
	}
	if !ingestCovered {
		c.fail("no PodDisruptionBudget covers the ingest pods")
	}
}

// autoscalers checks the HPAs and KEDA ScaledObjects and notes the
// Deployments they scale.
func (c *check) autoscalers() {
	target := func(who, apiVersion, kind, name string) *appsv1.Deployment {
		if (apiVersion != "" && apiVersion != "apps/v1") || (kind != "" && kind != "Deployment") {
			c.fail("%s scales %s %s: only the Deployments of the base are scaled", who, apiVersion, kind)
			return nil
		}
		for _, d := range c.o.deployments {
			if d.Name == name {
				if _, dup := c.scaled[name]; dup {
					c.fail("%s: Deployment %s has a second autoscaler", who, name)
				}
				return d
			}
		}
		c.fail("%s targets no Deployment of the base (%q)", who, name)
		return nil
	}
	for _, h := range c.o.hpas {
		who := "HorizontalPodAutoscaler " + h.Name
		d := target(who, h.Spec.ScaleTargetRef.APIVersion, h.Spec.ScaleTargetRef.Kind, h.Spec.ScaleTargetRef.Name)
		minReplicas := int32(1)
		if h.Spec.MinReplicas != nil {
			minReplicas = *h.Spec.MinReplicas
		}
		if h.Spec.MaxReplicas < minReplicas {
			c.fail("%s: maxReplicas %d is below minReplicas %d", who, h.Spec.MaxReplicas, minReplicas)
		}
		if d == nil {
			continue
		}
		c.scaled[d.Name] = minReplicas
		for _, m := range h.Spec.Metrics {
			if m.Type != autoscalingv2.ResourceMetricSourceType || m.Resource == nil || m.Resource.Target.Type != autoscalingv2.UtilizationMetricType {
				continue
			}
			for _, ct := range d.Spec.Template.Spec.Containers {
				if _, ok := ct.Resources.Requests[m.Resource.Name]; !ok {
					c.fail("%s: utilization of %s needs a %s request on every container of %s", who, m.Resource.Name, m.Resource.Name, d.Name)
				}
			}
		}
	}
	for _, so := range c.o.scaledObjects {
		who := "ScaledObject " + so.Name
		ref := so.Spec.ScaleTargetRef
		d := target(who, ref.APIVersion, ref.Kind, ref.Name)
		minReplicas, maxReplicas := int32(0), int32(100) // KEDA's defaults
		if so.Spec.MinReplicaCount != nil {
			minReplicas = *so.Spec.MinReplicaCount
		}
		if so.Spec.MaxReplicaCount != nil {
			maxReplicas = *so.Spec.MaxReplicaCount
		}
		if minReplicas < 1 || maxReplicas < minReplicas {
			c.fail("%s: minReplicaCount %d must be at least 1 and at most maxReplicaCount %d", who, minReplicas, maxReplicas)
		}
		if d != nil {
			c.scaled[d.Name] = max(minReplicas, 1)
		}
		if len(so.Spec.Triggers) == 0 {
			c.fail("%s: no trigger", who)
		}
		for _, tr := range so.Spec.Triggers {
			if tr.Type != "prometheus" {
				c.fail("%s: trigger %q: the example scales on Prometheus' %s", who, tr.Type, lagMetric)
				continue
			}
			c.prometheusTrigger(who, tr.Metadata)
		}
	}
}

// prometheusTrigger decodes a prometheus trigger's metadata strictly and
// checks that it asks for the stream's lag.
func (c *check) prometheusTrigger(who string, md map[string]string) {
	b, _ := json.Marshal(md)
	var p prometheusTrigger
	if err := strictDecode(b, &p); err != nil {
		c.fail("%s: prometheus trigger metadata: %v", who, err)
		return
	}
	if u, err := url.Parse(p.ServerAddress); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		c.fail("%s: serverAddress %q is not a Prometheus URL", who, p.ServerAddress)
	}
	if !strings.Contains(p.Query, lagMetric) {
		c.fail("%s: the query %q does not read %s", who, p.Query, lagMetric)
	}
	if v, err := strconv.ParseFloat(p.Threshold, 64); err != nil || v <= 0 {
		c.fail("%s: threshold %q must be a positive number", who, p.Threshold)
	}
}

// containerPort resolves a probe's or Service's port (a number or the name
// of a containerPort) to a number.
func containerPort(ct *corev1.Container, p intstr.IntOrString) (int, bool) {
	for _, cp := range ct.Ports {
		if (p.Type == intstr.String && cp.Name == p.StrVal) || (p.Type == intstr.Int && cp.ContainerPort == p.IntVal) {
			return int(cp.ContainerPort), true
		}
	}
	if p.Type == intstr.Int {
		return int(p.IntVal), true // a port the container serves without declaring it
	}
	return 0, false
}

// splitImage returns an image reference without its tag or digest, and
// the tag or digest.
func splitImage(image string) (string, string) {
	if ref, digest, ok := strings.Cut(image, "@"); ok {
		return ref, digest
	}
	if i := strings.LastIndex(image, ":"); i > strings.LastIndex(image, "/") {
		return image[:i], image[i+1:]
	}
	return image, ""
}

func cmpPtr[T any](a, b *T) *T {
	if a != nil {
		return a
	}
	return b
}

// renderAndCheck renders overlay from tree and runs every check.
func renderAndCheck(tree kubeTree, overlay string) error {
	errs := tree.checkTree()
	rendered, err := tree.render(overlay)
	if err != nil {
		return joinErrs(append(errs, fmt.Errorf("kustomize: %w", err)))
	}
	o, err := decodeObjects(rendered)
	if err != nil {
		return joinErrs(append(errs, err))
	}
	return joinErrs(append(errs, checkObjects(o)...))
}

// TestKubernetesManifests renders the base alone and with each component
// and checks every object.
func TestKubernetesManifests(t *testing.T) {
	tree := readKubeTree(t)
	names := make([]string, 0, len(overlays))
	for n := range overlays {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, overlay := range names {
		t.Run(overlay, func(t *testing.T) {
			if err := renderAndCheck(tree, overlay); err != nil {
				t.Fatal(err)
			}
		})
	}
	// The one-sweep form of reconcile in a CronJob passes too (the
	// patches reach Deployments and Jobs, so the CronJob carries its own
	// pod settings).
	t.Run("ReconcileAsCronJob", func(t *testing.T) {
		tree := maps.Clone(tree)
		tree["reconcile.yaml"] = reconcileCronJob
		if err := renderAndCheck(tree, "base"); err != nil {
			t.Fatal(err)
		}
		tree["reconcile.yaml"] = strings.Replace(reconcileCronJob, "args: [reconcile]", "args: [reconcile, --every=1m]", 1)
		if err := renderAndCheck(tree, "base"); err == nil || !strings.Contains(err.Error(), "a CronJob never completes") {
			t.Fatalf("reconcile --every in a CronJob: want an error, got %v", err)
		}
	})
	t.Run("Rendered", func(t *testing.T) {
		rendered, err := tree.render("all")
		if err != nil {
			t.Fatal(err)
		}
		o, err := decodeObjects(rendered)
		if err != nil {
			t.Fatal(err)
		}
		got := map[string]int{"ServiceAccount": len(o.serviceAccounts), "Service": len(o.services), "Deployment": len(o.deployments),
			"Job": len(o.jobs), "PodDisruptionBudget": len(o.pdbs), "HorizontalPodAutoscaler": len(o.hpas), "ScaledObject": len(o.scaledObjects)}
		want := map[string]int{"ServiceAccount": 1, "Service": 1, "Deployment": 4, "Job": 1, "PodDisruptionBudget": 3, "HorizontalPodAutoscaler": 1, "ScaledObject": 1}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("objects by kind: got %v, want %v", got, want)
		}
	})
}

// reconcileCronJob is reconcile's one-sweep form as a CronJob.
const reconcileCronJob = `apiVersion: batch/v1
kind: CronJob
metadata:
  name: outboxd-reconcile
spec:
  schedule: "*/5 * * * *"
  concurrencyPolicy: Forbid
  jobTemplate:
    spec:
      template:
        metadata:
          labels: {app.kubernetes.io/name: outboxd, app.kubernetes.io/component: reconcile}
        spec:
          restartPolicy: Never
          serviceAccountName: outboxd
          automountServiceAccountToken: false
          enableServiceLinks: false
          securityContext: {runAsNonRoot: true, runAsUser: 65532, runAsGroup: 65532, seccompProfile: {type: RuntimeDefault}}
          containers:
            - name: outboxd
              image: outboxd
              args: [reconcile]
              env:
                - {name: OUTBOXD_STORE, valueFrom: {secretKeyRef: {name: outboxd, key: store}}}
                - {name: OUTBOXD_REDIS_URL, valueFrom: {secretKeyRef: {name: outboxd, key: redis-url}}}
                - {name: OUTBOXD_POSTGRES_URL, valueFrom: {secretKeyRef: {name: outboxd, key: postgres-url}}}
                - {name: GOMEMLIMIT, value: 170MiB}
              resources: {requests: {cpu: 50m, memory: 96Mi}, limits: {cpu: 500m, memory: 192Mi}}
              securityContext: {allowPrivilegeEscalation: false, readOnlyRootFilesystem: true, capabilities: {drop: [ALL]}}
`

// kubeEdit changes one file of the tree: old must occur in it exactly
// once (so a case cannot silently stop testing anything); a file that does
// not exist is created with new.
type kubeEdit struct{ file, old, new string }

// TestKubernetesManifestsBroken proves that each check can fail: every
// case breaks one thing in a copy of the tree and must fail with its
// message.
func TestKubernetesManifestsBroken(t *testing.T) {
	const (
		workEnvRedis = "            - name: OUTBOXD_REDIS_URL\n              valueFrom:\n                secretKeyRef:\n                  name: outboxd\n                  key: redis-url\n            - name: OUTBOXD_POSTGRES_URL"
		workLimits   = "            limits:\n              cpu: \"1\"\n              memory: 256Mi\n---\napiVersion: policy/v1"
		workPGSecret = "            - name: OUTBOXD_POSTGRES_URL\n              valueFrom:\n                secretKeyRef:\n                  name: outboxd\n                  key: postgres-url"
		hpaPatch     = "patches:\n  - target:\n      group: apps\n      version: v1\n      kind: Deployment\n      name: outboxd-ingest\n    patch: |-\n      - op: remove\n        path: /spec/replicas\n"
		svcSelector  = "  type: ClusterIP\n  selector:\n    app.kubernetes.io/name: outboxd\n    app.kubernetes.io/component: ingest"
		pdbSelector  = "  minAvailable: 1\n  unhealthyPodEvictionPolicy: AlwaysAllow\n  selector:\n    matchLabels:\n      app.kubernetes.io/name: outboxd\n      app.kubernetes.io/component: ingest"
		livenessPath = "          livenessProbe:\n            httpGet:\n              path: /healthz"
		kedaTarget   = "    kind: Deployment\n    name: outboxd-work"
		ingestToken  = "            - name: OUTBOXD_AUTH_TOKEN\n              valueFrom:\n                secretKeyRef:\n                  name: outboxd\n                  key: auth-token\n"
	)
	cases := []struct {
		name  string
		edits []kubeEdit
		want  string
	}{
		{"UnknownField", []kubeEdit{{"serve-defaults.yaml", "readinessProbe:", "readinesProbe:"}}, `Deployment outboxd-ingest: unknown field "spec.template.spec.containers[0].readinesProbe"`},
		{"WrongType", []kubeEdit{{"dispatch.yaml", "replicas: 2", "replicas: two"}}, "Deployment outboxd-dispatch: json: cannot unmarshal string into Go struct field DeploymentSpec.spec.replicas of type int32"},
		{"UnknownFieldInScaledObject", []kubeEdit{{"components/keda-work/scaledobject.yaml", "minReplicaCount: 2", "minReplicas: 2"}}, `ScaledObject outboxd-work: unknown field "spec.minReplicas"`},
		{"UnknownTriggerMetadata", []kubeEdit{{"components/keda-work/scaledobject.yaml", `threshold: "50000"`, `treshold: "50000"`}}, `unknown field "treshold"`},
		{"UnknownKind", []kubeEdit{{"kustomization.yaml", "  - reconcile.yaml\n", "  - reconcile.yaml\n  - extra.yaml\n"}, {"extra.yaml", "", "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: extra\n"}}, "ConfigMap extra: no API type"},
		{"UnknownKustomizationField", []kubeEdit{{"kustomization.yaml", "images:", "image:"}}, `unknown field "image"`},
		{"UnlistedManifest", []kubeEdit{{"forgotten.yaml", "", "apiVersion: v1\nkind: ServiceAccount\nmetadata:\n  name: forgotten\n"}}, "forgotten.yaml is not listed by any kustomization"},
		{"MisspeltFlag", []kubeEdit{{"work.yaml", "[work, --http-addr=:8080]", "[work, --http-adr=:8080]"}}, "outboxd work: --http-adr is not one of its flags"},
		{"FlagOfAnotherRole", []kubeEdit{{"dispatch.yaml", "--ui-read-only]", "--ui-read-only, --batch-size=100]"}}, "outboxd dispatch: --batch-size is not one of its flags"},
		{"BadFlagValue", []kubeEdit{{"reconcile.yaml", "--every=1m", "--every=1minute"}}, "outboxd reconcile --every=1minute"},
		{"EnvNotOfTheRole", []kubeEdit{{"ingest.yaml", "- name: OUTBOXD_AUTH_TOKEN", "- name: OUTBOXD_REDIS_URL"}}, "OUTBOXD_REDIS_URL is not a variable of this role"},
		{"LoopbackHTTPAddr", []kubeEdit{{"work.yaml", "--http-addr=:8080", "--http-addr=127.0.0.1:8080"}}, "listens on loopback only"},
		{"DefaultHTTPAddr", []kubeEdit{{"work.yaml", "[work, --http-addr=:8080]", "[work]"}}, "--http-addr 127.0.0.1:8080 listens on loopback only"},
		{"ReadinessPath", []kubeEdit{{"serve-defaults.yaml", "path: /readyz", "path: /ready"}}, "readinessProbe must GET /readyz"},
		{"LivenessOnReadyz", []kubeEdit{{"serve-defaults.yaml", livenessPath, strings.Replace(livenessPath, "/healthz", "/readyz", 1)}}, "livenessProbe must GET /healthz"},
		{"ProbePortNotServed", []kubeEdit{{"serve-defaults.yaml", "containerPort: 8080", "containerPort: 9090"}}, "no containerPort 8080"},
		{"NoReadinessProbe", []kubeEdit{{"serve-defaults.yaml", "          readinessProbe:\n            httpGet:\n              path: /readyz\n              port: http\n            periodSeconds: 5\n            timeoutSeconds: 3\n            failureThreshold: 2\n", ""}}, "readinessProbe must be set"},
		{"WritableRoot", []kubeEdit{{"pod-defaults.yaml", "readOnlyRootFilesystem: true", "readOnlyRootFilesystem: false"}}, "readOnlyRootFilesystem must be true"},
		{"PrivilegeEscalation", []kubeEdit{{"pod-defaults.yaml", "allowPrivilegeEscalation: false", "allowPrivilegeEscalation: true"}}, "allowPrivilegeEscalation must be false"},
		{"Root", []kubeEdit{{"pod-defaults.yaml", "runAsNonRoot: true", "runAsNonRoot: false"}}, "runAsNonRoot must be true"},
		{"OtherUser", []kubeEdit{{"pod-defaults.yaml", "runAsUser: 65532", "runAsUser: 1000"}}, "runAsUser must be the image's user 65532"},
		{"Capabilities", []kubeEdit{{"pod-defaults.yaml", "drop: [ALL]", "drop: [NET_RAW]"}}, "capabilities must drop ALL"},
		{"Seccomp", []kubeEdit{{"pod-defaults.yaml", "type: RuntimeDefault", "type: Unconfined"}}, "seccompProfile must be RuntimeDefault"},
		{"TokenMounted", []kubeEdit{{"pod-defaults.yaml", "automountServiceAccountToken: false", "automountServiceAccountToken: true"}}, "automountServiceAccountToken must be false"},
		{"ServiceLinks", []kubeEdit{{"pod-defaults.yaml", "enableServiceLinks: false", "enableServiceLinks: true"}}, "enableServiceLinks must be false"},
		{"NoLimits", []kubeEdit{{"work.yaml", workLimits, "---\napiVersion: policy/v1"}}, "Deployment outboxd-work container outboxd: resources.limits.cpu must be set"},
		{"GoMemLimitAboveLimit", []kubeEdit{{"work.yaml", "value: 230MiB", "value: 300MiB"}}, "GOMEMLIMIT 300MiB must be below the memory limit 256Mi"},
		{"IngestBodiesBeyondMemory", []kubeEdit{{"ingest.yaml", "--http-max-bodies=32", "--http-max-bodies=64"}}, "ingest needs up to 390 MiB"},
		{"LiteralPassword", []kubeEdit{{"work.yaml", workPGSecret, "            - name: OUTBOXD_POSTGRES_URL\n              value: postgres://outboxd:secret@pg:5432/outboxd"}}, "OUTBOXD_POSTGRES_URL must come from the Secret outboxd, key postgres-url"},
		{"TokenInArgs", []kubeEdit{{"ingest.yaml", ingestToken, ""}, {"ingest.yaml", "--http-max-bodies=32]", "--http-max-bodies=32, --auth-token=s3cret]"}}, "--auth-token carries a password or a token: give it as OUTBOXD_AUTH_TOKEN, never as an argument"},
		{"BackendMissing", []kubeEdit{{"work.yaml", workEnvRedis, "            - name: OUTBOXD_POSTGRES_URL"}}, "OUTBOXD_REDIS_URL is not set"},
		{"TokenMissing", []kubeEdit{{"ingest.yaml", ingestToken, ""}}, "OUTBOXD_AUTH_TOKEN is not set (nor another token): outboxd refuses to serve its API beyond loopback without one"},
		{"WorkTokenMissing", []kubeEdit{{"work.yaml", ingestToken, ""}}, "Deployment outboxd-work container outboxd: outboxd work: OUTBOXD_AUTH_TOKEN is not set (nor another token)"},
		{"AllowNoAuth", []kubeEdit{{"work.yaml", "[work, --http-addr=:8080]", "[work, --http-addr=:8080, --allow-no-auth]"}}, "outboxd work: --allow-no-auth serves the API to anyone who reaches it"},
		{"OtherSecretKey", []kubeEdit{{"work.yaml", "key: postgres-url", "key: pg"}}, "OUTBOXD_POSTGRES_URL must come from the Secret outboxd, key postgres-url (valueFrom.secretKeyRef), not secret outboxd/pg"},
		{"ShortGrace", []kubeEdit{{"serve-defaults.yaml", "terminationGracePeriodSeconds: 80", "terminationGracePeriodSeconds: 70"}}, "Deployment outboxd-ingest container outboxd: terminationGracePeriodSeconds 1m10s is shorter than outboxd ingest may take to stop (1m15s"},
		{"PreStopExec", []kubeEdit{{"ingest.yaml", "              sleep:\n                seconds: 5", "              exec:\n                command: [sleep, \"5\"]"}}, "a preStop exec needs a shell"},
		{"CommandOverride", []kubeEdit{{"work.yaml", "          image: outboxd\n", "          image: outboxd\n          command: [/bin/sh, -c]\n"}}, "replaces the image's entrypoint"},
		{"LatestImage", []kubeEdit{{"kustomization.yaml", "newTag: dev", "newTag: latest"}}, `image "outboxd:latest" must be outboxd with a version tag`},
		{"OneDispatcher", []kubeEdit{{"dispatch.yaml", "replicas: 2", "replicas: 1"}}, "Deployment outboxd-dispatch: replicas 1, at least 2"},
		{"OneSweepInADeployment", []kubeEdit{{"reconcile.yaml", "[reconcile, --every=1m, ", "[reconcile, "}}, "exits when it is done"},
		{"ServiceInAJob", []kubeEdit{{"migrate.yaml", "args: [migrate]", "args: [work, --http-addr=:8080]"}}, "outboxd migrate must run in exactly one workload (found 0)"},
		{"ServiceSelectsNothing", []kubeEdit{{"ingest.yaml", svcSelector, strings.Replace(svcSelector, "component: ingest", "component: ingester", 1)}}, "Service outboxd-ingest selects the pods of 0 workloads"},
		{"ServiceTargetsOtherPort", []kubeEdit{{"ingest.yaml", "targetPort: http", "targetPort: 9090"}}, "Service outboxd-ingest port http targets 9090"},
		{"PDBOnAnotherRole", []kubeEdit{{"ingest.yaml", pdbSelector, strings.Replace(pdbSelector, "component: ingest", "component: reconcile", 1)}}, "no PodDisruptionBudget covers the ingest pods"},
		{"PDBBlocksDrains", []kubeEdit{{"ingest.yaml", "minAvailable: 1", "minAvailable: 2"}}, "minAvailable 2 of 2 replicas of Deployment outboxd-ingest blocks every node drain"},
		{"OverlappingSelector", []kubeEdit{{"reconcile.yaml", "  selector:\n    matchLabels:\n      app.kubernetes.io/name: outboxd\n      app.kubernetes.io/component: reconcile\n", "  selector:\n    matchLabels:\n      app.kubernetes.io/name: outboxd\n"}}, "Deployment outboxd-reconcile: its selector also matches the pods of"},
		{"ScaledObjectTargetMissing", []kubeEdit{{"components/keda-work/scaledobject.yaml", kedaTarget, kedaTarget + "er"}}, `ScaledObject outboxd-work targets no Deployment of the base ("outboxd-worker")`},
		{"ScaledObjectOtherMetric", []kubeEdit{{"components/keda-work/scaledobject.yaml", "(outboxd_stream_lag{", "(outboxd_stream_length{"}}, "does not read outboxd_stream_lag"},
		{"ScaledObjectThresholdNumber", []kubeEdit{{"components/keda-work/scaledobject.yaml", `threshold: "50000"`, "threshold: 50000"}}, "ScaledObject outboxd-work: json: cannot unmarshal number into Go struct field"},
		{"ScaledObjectToZero", []kubeEdit{{"components/keda-work/scaledobject.yaml", "minReplicaCount: 2", "minReplicaCount: 0"}}, "minReplicaCount 0 must be at least 1"},
		{"AutoscaledReplicasKept", []kubeEdit{{"components/hpa-ingest/kustomization.yaml", hpaPatch, ""}}, "an autoscaler sets its replicas, so the manifest must not"},
		{"HPAOneReplica", []kubeEdit{{"components/hpa-ingest/hpa.yaml", "minReplicas: 2", "minReplicas: 1"}}, "Deployment outboxd-ingest: replicas 1, at least 2"},
		{"HPAWithoutRequests", []kubeEdit{{"ingest.yaml", "            requests:\n              cpu: 500m\n", "            requests:\n"}}, "utilization of cpu needs a cpu request"},
	}
	base := readKubeTree(t)
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			tree := maps.Clone(base)
			for _, e := range c.edits {
				if content, ok := tree[e.file]; ok {
					tree[e.file] = replaceOnce(t, e.file, content, e.old, e.new)
				} else {
					tree[e.file] = e.new
				}
			}
			err := renderAndCheck(tree, "all")
			if err == nil {
				t.Fatalf("the broken tree passed every check; want an error with %q", c.want)
			}
			if !strings.Contains(err.Error(), c.want) {
				t.Fatalf("want an error with %q, got:\n%v", c.want, err)
			}
		})
	}
}
