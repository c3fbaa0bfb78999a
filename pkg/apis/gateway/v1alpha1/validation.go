package v1alpha1

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net/url"

	apivalidation "k8s.io/apimachinery/pkg/api/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/clustergateway/cluster-gateway/pkg/cabundle"
)

// ValidateClusterGateway checks a gateway as it will be stored: after
// defaulting and, on update, after omitted credential material was carried over.
func ValidateClusterGateway(gw *ClusterGateway) field.ErrorList {
	allErrs := apivalidation.ValidateObjectMeta(&gw.ObjectMeta, false, apivalidation.NameIsDNSSubdomain, field.NewPath("metadata"))
	spec := field.NewPath("spec")
	allErrs = append(allErrs, validateEndpoint(&gw.Spec.Endpoint, spec.Child("endpoint"))...)
	allErrs = append(allErrs, validateCredential(&gw.Spec.Credential, spec.Child("credential"))...)
	switch gw.Spec.Impersonation.Mode {
	case ImpersonationNone, ImpersonationCaller:
	default:
		allErrs = append(allErrs, field.NotSupported(spec.Child("impersonation", "mode"), gw.Spec.Impersonation.Mode,
			[]ImpersonationMode{ImpersonationNone, ImpersonationCaller}))
	}
	return allErrs
}

// ValidateClusterGatewayUpdate checks an update; the name is immutable.
func ValidateClusterGatewayUpdate(gw, old *ClusterGateway) field.ErrorList {
	allErrs := apivalidation.ValidateObjectMetaUpdate(&gw.ObjectMeta, &old.ObjectMeta, field.NewPath("metadata"))
	return append(allErrs, ValidateClusterGateway(gw)...)
}

func validateEndpoint(ep *Endpoint, p *field.Path) field.ErrorList {
	var allErrs field.ErrorList
	switch ep.Type {
	case EndpointDirect, EndpointKonnectivity:
	default:
		allErrs = append(allErrs, field.NotSupported(p.Child("type"), ep.Type, []EndpointType{EndpointDirect, EndpointKonnectivity}))
	}
	if _, err := ParseAddress(ep.Address); err != nil {
		allErrs = append(allErrs, field.Invalid(p.Child("address"), ep.Address, err.Error()))
	}
	if len(ep.CABundle) > 0 {
		if _, err := ParseCABundle(ep.CABundle); err != nil {
			allErrs = append(allErrs, field.Invalid(p.Child("caBundle"), "<PEM>", err.Error()))
		}
		if ep.InsecureSkipTLSVerify {
			allErrs = append(allErrs, field.Forbidden(p.Child("insecureSkipTLSVerify"), "may not be true when caBundle is set: either verify with the bundle or opt out of verification"))
		}
	}
	if ep.ProxyURL != "" {
		if ep.Type == EndpointKonnectivity {
			allErrs = append(allErrs, field.Forbidden(p.Child("proxyURL"), "is only supported for type Direct; Konnectivity endpoints are dialed through the gateway's proxy-server"))
		} else if _, err := ParseProxyURL(ep.ProxyURL); err != nil {
			allErrs = append(allErrs, field.Invalid(p.Child("proxyURL"), ep.ProxyURL, err.Error()))
		}
	}
	return allErrs
}

func validateCredential(c *Credential, p *field.Path) field.ErrorList {
	var allErrs field.ErrorList
	switch c.Type {
	case CredentialX509Certificate:
		if c.BearerToken != "" {
			allErrs = append(allErrs, field.Forbidden(p.Child("bearerToken"), "must be empty for type X509Certificate"))
		}
		switch {
		case c.X509 == nil || len(c.X509.Certificate) == 0:
			allErrs = append(allErrs, field.Required(p.Child("x509", "certificate"), "a PEM client certificate is required for type X509Certificate"))
		case len(c.X509.PrivateKey) == 0:
			allErrs = append(allErrs, field.Required(p.Child("x509", "privateKey"), "a PEM private key is required for type X509Certificate"))
		default:
			if _, err := ParseKeyPair(c.X509.Certificate, c.X509.PrivateKey); err != nil {
				allErrs = append(allErrs, field.Invalid(p.Child("x509"), "<PEM>", err.Error()))
			}
		}
	case CredentialBearerToken:
		if c.X509 != nil && (len(c.X509.Certificate) > 0 || len(c.X509.PrivateKey) > 0) {
			allErrs = append(allErrs, field.Forbidden(p.Child("x509"), "must be empty for type BearerToken"))
		}
		if c.BearerToken == "" {
			allErrs = append(allErrs, field.Required(p.Child("bearerToken"), "a token is required for type BearerToken"))
		}
	default:
		allErrs = append(allErrs, field.NotSupported(p.Child("type"), c.Type, []CredentialType{CredentialX509Certificate, CredentialBearerToken}))
	}
	return allErrs
}

// ParseAddress parses an API server address: an https URL with a host.
func ParseAddress(address string) (*url.URL, error) {
	if address == "" {
		return nil, fmt.Errorf("is required: the https URL of the cluster's API server, e.g. https://10.0.0.1:6443")
	}
	u, err := url.Parse(address)
	if err != nil {
		return nil, fmt.Errorf("is not a URL: %v", err)
	}
	if u.Scheme != "https" {
		return nil, fmt.Errorf("must be an https URL, e.g. https://10.0.0.1:6443")
	}
	if u.Host == "" || u.Hostname() == "" {
		return nil, fmt.Errorf("must name a host, e.g. https://10.0.0.1:6443")
	}
	if u.User != nil || u.RawQuery != "" || u.Fragment != "" {
		return nil, fmt.Errorf("must not carry user info, a query or a fragment")
	}
	return u, nil
}

// ParseProxyURL parses an http, https or socks5 proxy URL.
func ParseProxyURL(proxyURL string) (*url.URL, error) {
	u, err := url.Parse(proxyURL)
	if err != nil {
		return nil, fmt.Errorf("is not a URL: %v", err)
	}
	switch u.Scheme {
	case "http", "https", "socks5":
	default:
		return nil, fmt.Errorf("must be an http, https or socks5 URL, e.g. socks5://proxy:1080")
	}
	if u.Host == "" {
		return nil, fmt.Errorf("must name a host, e.g. http://proxy:3128")
	}
	return u, nil
}

// ParseCABundle parses a PEM bundle of one or more certificates, as strictly
// as the gateway's transports will (an empty bundle would trust nothing).
func ParseCABundle(data []byte) (*x509.CertPool, error) {
	pool, err := cabundle.Parse(data)
	if err != nil {
		return nil, fmt.Errorf("must be a PEM bundle of CA certificates: %v", err)
	}
	return pool, nil
}

// ParseKeyPair parses a PEM client certificate and key and checks that they match.
func ParseKeyPair(certPEM, keyPEM []byte) (*tls.Certificate, error) {
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return nil, fmt.Errorf("certificate and private key are not a usable pair: %v", err)
	}
	leaf, err := x509.ParseCertificate(pair.Certificate[0])
	if err != nil {
		return nil, fmt.Errorf("certificate does not parse: %v", err)
	}
	pair.Leaf = leaf
	return &pair, nil
}
