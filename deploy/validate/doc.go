// Package validate holds the tests that render every `fastagent deploy`
// target and check it with the tools of its platform: Kubernetes objects
// decoded strictly into k8s.io/api types, the Helm chart linted and
// rendered through Helm's library, compose files loaded by compose-go.
// It is a module of its own so that those libraries stay out of
// fastagent's go.mod.
package validate
