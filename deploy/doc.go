// Package deploy holds no code: its tests hold the deployment artifacts to
// the rules of docs/deploy.md without Docker or a cluster, so `make test`
// catches a broken one.
//
//   - kubernetes_test.go renders the Kustomize base deploy/kubernetes, alone
//     and with each of its components, with Kustomize's own engine (krusty,
//     what `kubectl apply -k` runs), decodes every object strictly into the
//     Kubernetes API types (KEDA's ScaledObject into a local struct of the
//     fields it uses: an unknown field fails), and checks the pods: non-root,
//     read-only root filesystem, no privilege escalation, no capabilities,
//     seccomp, probes on /readyz and /healthz at the port --http-addr serves,
//     requests and limits, secrets from the Secret, the grace period, the
//     Service, PodDisruptionBudgets and autoscalers.
//   - compose_test.go loads deploy/compose.yaml with the Compose
//     specification's loader (compose-go, with its schema) and checks the
//     services, their order, the backing services' settings and the same
//     container rules.
//   - dockerfile_test.go reads the Dockerfile and .dockerignore at the
//     repository root.
//
// Every flag and OUTBOXD_* variable an artifact gives a role is checked
// against that role's own flag table: the tests build ./cmd/outboxd and run
// `outboxd <role> <flags…> -h`, which fails on a flag the role does not
// have or a value its flag cannot parse. Each test has a table of broken
// artifacts that proves each of its checks can fail.
package deploy
