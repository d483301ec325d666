// Package validate checks buildrisk-radar's deploy files with the real
// loaders, not field by field: deploy/k8s is built by kustomize's own
// library (what `kubectl kustomize deploy/k8s` runs) and every object it
// emits is decoded strictly into the Kubernetes API types, so an unknown or
// misspelled field fails; deploy/compose.yaml is loaded by the Compose
// Specification's reference loader, schema validation included.
//
// It is a Go module of its own so that the Kubernetes and Compose libraries
// stay out of the service's module; `make test` runs its tests too.
package validate
