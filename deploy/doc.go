// Package deploy holds jetbus's deployment files and the tests that check them offline: the
// images' Dockerfile, the compose setup (3-node NATS cluster, MongoDB replica set, bridge and
// projectors), the Kubernetes kustomize base and the values for NATS's Helm chart. README.md
// says how to use each, what these tests check and what they cannot (nothing here starts a
// container or talks to a cluster).
//
// It is a module of its own (github.com/jetbus/jetbus/deploy), so that the libraries that parse
// these files — compose-go, the Kubernetes API types, kustomize, BuildKit's Dockerfile parser —
// never enter jetbus's module graph. It reaches jetbus's configuration loader through a replace
// of github.com/jetbus/jetbus by the repository root.
package deploy
