"""Kubernetes semantics without Django: each rule of the cluster written once, for the console's apps and
for the emulator (`kubesim/`) alike. It imports the standard library only (`kube.client` also the official
`kubernetes` client), never an app of the console.

- `kube.quantity`: resource quantities (`500m`, `1Gi`, `1e3`): one parser that refuses bad input with the
  API server's words, and the canonical text of an amount.
- `kube.labels`: label syntax, label selectors (`matchLabels`/`matchExpressions` and the text form of
  `?labelSelector=`), node selector requirements with every operator, node affinity (required and
  preferred) and a pod's `nodeSelector`.
- `kube.taints`: taints against tolerations (empty keys, `Exists`, empty effects, `PreferNoSchedule`).
- `kube.requests`: a pod's effective requests (init containers, sidecars, overhead, limits standing in
  for missing requests) and whether it still holds them.
- `kube.client`: the one factory of API clients, the API server's refusals (`ApiRefusal`) and one client to
  custom objects with one error contract.
- `kube.reference`: container image references by the distribution reference grammar.
- `kube.crd`, `kube.validation`: the published CRD manifests of `kube/crds/`, and objects checked against
  their OpenAPI schema and CEL rules as the API server checks them.
"""
