// Package credentials runs the credential providers an operator configures
// (--credential-providers-file): exec plugins as client-go runs them, one
// owned client-go Authenticator per ClusterGateway, released with it. A
// ClusterGateway names a provider and passes it per-cluster data; it never
// names a command. It also holds the credential metrics of every source
// kind (metrics.go).
package credentials
