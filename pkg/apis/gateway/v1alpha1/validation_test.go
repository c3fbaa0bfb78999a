package v1alpha1

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

func tokenGateway(typ EndpointType, address, proxyURL string) *ClusterGateway {
	return &ClusterGateway{
		ObjectMeta: metav1.ObjectMeta{Name: "c"},
		Spec: ClusterGatewaySpec{
			Endpoint:      Endpoint{Type: typ, Address: address, ProxyURL: proxyURL},
			Credential:    Credential{Type: CredentialBearerToken, BearerToken: "t"},
			Impersonation: Impersonation{Mode: ImpersonationNone},
		},
	}
}

// An address or proxy host that a forward proxy, a konnectivity agent or a
// cgo resolver reads as 127.0.0.1 (inet_aton) while netip reads no address
// is refused, for each route, with a field error that says what to write.
// Canonical literals and names are valid as before (the endpoint policy,
// applied by the registry, judges the literals).
func TestEndpointHostsInOtherIPv4FormsAreInvalid(t *testing.T) {
	for _, host := range []string{"2130706433", "127.1", "127.0.1", "0177.0.0.1", "0x7f000001", "017700000001", "0x7f.1", "0177.1", "127.0.0.1."} {
		for _, tc := range []struct {
			gw    *ClusterGateway
			field string
		}{
			{tokenGateway(EndpointDirect, "https://"+host+":6443", ""), "spec.endpoint.address"},
			{tokenGateway(EndpointKonnectivity, "https://"+host+":6443", ""), "spec.endpoint.address"},
			{tokenGateway(EndpointDirect, "https://cluster.example:6443", "http://"+host+":3128"), "spec.endpoint.proxyURL"},
			{tokenGateway(EndpointDirect, "https://cluster.example:6443", "https://u:p@"+host+":3128"), "spec.endpoint.proxyURL"},
			{tokenGateway(EndpointDirect, "https://cluster.example:6443", "socks5://"+host+":1080"), "spec.endpoint.proxyURL"},
		} {
			errs := ValidateClusterGateway(tc.gw)
			if len(errs) != 1 || errs[0].Field != tc.field || errs[0].Type != field.ErrorTypeInvalid ||
				!strings.Contains(errs[0].Detail, "write it in dotted-decimal form, 127.0.0.1") {
				t.Errorf("%s %s %s: %v, want one Invalid error on %s saying: write it in dotted-decimal form, 127.0.0.1",
					tc.gw.Spec.Endpoint.Type, tc.gw.Spec.Endpoint.Address, tc.gw.Spec.Endpoint.ProxyURL, errs, tc.field)
			}
			if agg := errs.ToAggregate(); agg != nil && strings.Contains(agg.Error(), ":p@") {
				t.Errorf("the error shows the proxy password: %v", errs)
			}
		}
	}
	for _, address := range []string{
		"https://127.0.0.1:6443",
		"https://[::1]:6443",
		"https://[::ffff:127.0.0.1]:6443",
		"https://[::ffff:7f00:1]:6443",
		"https://[fe80::1%25eth0]:6443",
		"https://cluster.example:6443",
		"https://cluster.example.:6443",
		"https://localhost:6443/prefix",
	} {
		if errs := ValidateClusterGateway(tokenGateway(EndpointDirect, address, "socks5://proxy.example:1080")); len(errs) > 0 {
			t.Errorf("%s: %v, want valid", address, errs)
		}
	}
	for _, proxyURL := range []string{"http://127.0.0.1:3128", "http://[::ffff:7f00:1]:3128", "socks5://localhost:1080", "https://proxy.example.:3128"} {
		if errs := ValidateClusterGateway(tokenGateway(EndpointDirect, "https://cluster.example:6443", proxyURL)); len(errs) > 0 {
			t.Errorf("proxy %s: %v, want valid", proxyURL, errs)
		}
	}
}

// A provider's config larger than MaxProviderConfigBytes is refused as too
// long, before it is parsed; one at the bound is valid.
func TestProviderConfigIsBounded(t *testing.T) {
	gw := func(n int) *ClusterGateway {
		raw := []byte(`{"k":"` + strings.Repeat("x", n-len(`{"k":""}`)) + `"}`)
		return &ClusterGateway{
			ObjectMeta: metav1.ObjectMeta{Name: "c"},
			Spec: ClusterGatewaySpec{
				Endpoint:      Endpoint{Type: EndpointDirect, Address: "https://cluster.example:6443"},
				Credential:    Credential{Type: CredentialProvider, Provider: &ProviderReference{Name: "eks", Config: &runtime.RawExtension{Raw: raw}}},
				Impersonation: Impersonation{Mode: ImpersonationNone},
			},
		}
	}
	if errs := ValidateClusterGateway(gw(MaxProviderConfigBytes)); len(errs) > 0 {
		t.Errorf("a config of %d bytes: %v, want valid", MaxProviderConfigBytes, errs)
	}
	errs := ValidateClusterGateway(gw(MaxProviderConfigBytes + 1))
	if len(errs) != 1 || errs[0].Field != "spec.credential.provider.config" || errs[0].Type != field.ErrorTypeTooLong {
		t.Errorf("a config of %d bytes: %v, want one TooLong error on spec.credential.provider.config", MaxProviderConfigBytes+1, errs)
	}
}

// A provider's additional args and environment (KEP-5339's ClusterProfile
// extensions) are bounded in count and size, carry no NUL, and add no
// variable that changes what the provider's process loads or runs: each
// bad value gives exactly one error, on its field; values at the bounds
// are valid.
func TestProviderAdditionalArgsAndEnvAreBounded(t *testing.T) {
	gw := func(args []string, env ...ProviderEnvVar) *ClusterGateway {
		return &ClusterGateway{
			ObjectMeta: metav1.ObjectMeta{Name: "c"},
			Spec: ClusterGatewaySpec{
				Endpoint:      Endpoint{Type: EndpointDirect, Address: "https://cluster.example:6443"},
				Credential:    Credential{Type: CredentialProvider, Provider: &ProviderReference{Name: "eks", AdditionalArgs: args, AdditionalEnv: env}},
				Impersonation: Impersonation{Mode: ImpersonationNone},
			},
		}
	}
	n := func(count int, s string) []string { return slices.Repeat([]string{s}, count) }
	ev := func(name, value string) ProviderEnvVar { return ProviderEnvVar{Name: name, Value: value} }
	var manyEnv []ProviderEnvVar
	for i := range MaxAdditionalEnv + 1 {
		manyEnv = append(manyEnv, ev(fmt.Sprintf("V%d", i), "x"))
	}
	big := strings.Repeat("x", MaxAdditionalArgBytes)
	for _, ok := range []*ClusterGateway{
		gw(n(MaxAdditionalArgs, big)),
		gw([]string{"--cluster", "prod", ""}, ev("REGION", big), ev("aws_profile", ""), ev("_X1", "a=b")),
		gw(nil, manyEnv[:MaxAdditionalEnv]...),
	} {
		if errs := ValidateClusterGateway(ok); len(errs) > 0 {
			t.Errorf("%+v: %v, want valid", ok.Spec.Credential.Provider, errs)
		}
	}
	for _, tc := range []struct {
		name  string
		gw    *ClusterGateway
		field string
		typ   field.ErrorType
	}{
		{"too many args", gw(n(MaxAdditionalArgs+1, "a")), "spec.credential.provider.additionalArgs", field.ErrorTypeTooMany},
		{"an arg too long", gw([]string{"a", big + "x"}), "spec.credential.provider.additionalArgs[1]", field.ErrorTypeTooLong},
		{"an arg with NUL", gw([]string{"a\x00b"}), "spec.credential.provider.additionalArgs[0]", field.ErrorTypeInvalid},
		{"too many variables", gw(nil, manyEnv...), "spec.credential.provider.additionalEnv", field.ErrorTypeTooMany},
		{"a name with =", gw(nil, ev("A=B", "x")), "spec.credential.provider.additionalEnv[0].name", field.ErrorTypeInvalid},
		{"a name starting with a digit", gw(nil, ev("1A", "x")), "spec.credential.provider.additionalEnv[0].name", field.ErrorTypeInvalid},
		{"an empty name", gw(nil, ev("", "x")), "spec.credential.provider.additionalEnv[0].name", field.ErrorTypeInvalid},
		{"a name twice", gw(nil, ev("A", "x"), ev("A", "y")), "spec.credential.provider.additionalEnv[1].name", field.ErrorTypeDuplicate},
		{"a value too long", gw(nil, ev("A", big+"x")), "spec.credential.provider.additionalEnv[0].value", field.ErrorTypeTooLong},
		{"a value with NUL", gw(nil, ev("A", "x\x00")), "spec.credential.provider.additionalEnv[0].value", field.ErrorTypeInvalid},
		{"PATH", gw(nil, ev("PATH", "/tmp")), "spec.credential.provider.additionalEnv[0].name", field.ErrorTypeForbidden},
		{"LD_PRELOAD", gw(nil, ev("LD_PRELOAD", "/tmp/x.so")), "spec.credential.provider.additionalEnv[0].name", field.ErrorTypeForbidden},
		{"ld_library_path", gw(nil, ev("ld_library_path", "/tmp")), "spec.credential.provider.additionalEnv[0].name", field.ErrorTypeForbidden},
		{"DYLD_INSERT_LIBRARIES", gw(nil, ev("DYLD_INSERT_LIBRARIES", "/tmp/x")), "spec.credential.provider.additionalEnv[0].name", field.ErrorTypeForbidden},
		{"KUBERNETES_EXEC_INFO", gw(nil, ev("KUBERNETES_EXEC_INFO", "{}")), "spec.credential.provider.additionalEnv[0].name", field.ErrorTypeForbidden},
		{"BASH_ENV", gw(nil, ev("BASH_ENV", "/tmp/x")), "spec.credential.provider.additionalEnv[0].name", field.ErrorTypeForbidden},
		{"PYTHONPATH", gw(nil, ev("PYTHONPATH", "/tmp")), "spec.credential.provider.additionalEnv[0].name", field.ErrorTypeForbidden},
		{"NODE_OPTIONS", gw(nil, ev("NODE_OPTIONS", "--require /tmp/x")), "spec.credential.provider.additionalEnv[0].name", field.ErrorTypeForbidden},
	} {
		errs := ValidateClusterGateway(tc.gw)
		if len(errs) != 1 || errs[0].Field != tc.field || errs[0].Type != tc.typ {
			t.Errorf("%s: %v, want one %s error on %s", tc.name, errs, tc.typ, tc.field)
		}
	}
}
