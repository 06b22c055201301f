package filestore

import (
	"fmt"
	"strconv"

	"github.com/vmesh/vmesh/store"
	networking "istio.io/api/networking/v1alpha3"
	security "istio.io/api/security/v1beta1"
	telemetry "istio.io/api/telemetry/v1alpha1"
)

// Problem is one semantic validation failure inside an object's spec, or,
// with a Severity other than SeverityError, a warning about config that is
// accepted but not (fully) enforced (warnings.go).
type Problem struct {
	Field    string // path inside spec, e.g. http[1].route[0].weight
	Message  string
	Severity store.Severity // zero: an error, which rejects the object
	Code     string         // a warning's stable code (VM1001, IST0101); "" for errors
}

type validator struct{ problems []Problem }

func (v *validator) add(field, format string, args ...any) {
	v.problems = append(v.problems, Problem{Field: field, Message: fmt.Sprintf(format, args...)})
}

func (v *validator) check(field, msg string) {
	if msg != "" {
		v.problems = append(v.problems, Problem{Field: field, Message: msg})
	}
}

func at(path string, i int) string { return fmt.Sprintf("%s[%d]", path, i) }

// Validate checks an object against the rules Istio itself enforces (its
// admission webhook's pkg/config/validation and its CRDs' schema rules;
// istio_parity_test.go compares the two on Istio's own YAML) and returns
// every problem found. The rules live in validate_<kind>.go; where vmesh
// departs from Istio the code says why. Labels and names in metadata are
// checked by the decoder.
func Validate(o *store.Object) []Problem {
	v := &validator{}
	validateAnnotations(v, o)
	switch spec := o.Spec.(type) {
	case *networking.ServiceEntry:
		validateServiceEntry(v, o.Namespace, o.Labels, spec)
	case *networking.WorkloadEntry:
		validateWorkloadEntry(v, "", spec, nil, true)
	case *networking.WorkloadGroup:
		validateWorkloadGroup(v, spec)
	case *networking.VirtualService:
		validateVirtualService(v, o.Namespace, spec)
	case *networking.DestinationRule:
		validateDestinationRule(v, o.Namespace, spec)
	case *networking.Sidecar:
		validateSidecar(v, o.Namespace, spec)
	case *networking.Gateway:
		validateGateway(v, o.Name, spec)
	case *security.PeerAuthentication:
		validatePeerAuthentication(v, spec)
	case *security.AuthorizationPolicy:
		validateAuthorizationPolicy(v, spec)
	case *security.RequestAuthentication:
		validateRequestAuthentication(v, spec)
	case *telemetry.Telemetry:
		validateTelemetry(v, spec)
	default:
		v.add("", "unsupported spec type %T", o.Spec)
	}
	return v.problems
}

// validateAnnotations applies Istio's metadata rules: istio.io/dry-run only
// on ALLOW and DENY AuthorizationPolicies, with a boolean value, and none
// of the internal.istio.io annotations Istio reserves for itself.
func validateAnnotations(v *validator, o *store.Object) {
	if val, ok := o.Annotations["istio.io/dry-run"]; ok {
		ap, isAuthz := o.Spec.(*security.AuthorizationPolicy)
		switch {
		case !isAuthz:
			v.add("", "the istio.io/dry-run annotation is only supported on AuthorizationPolicy")
		case ap.Action != security.AuthorizationPolicy_ALLOW && ap.Action != security.AuthorizationPolicy_DENY:
			v.add("", "the istio.io/dry-run annotation is only supported with action ALLOW or DENY")
		default:
			if _, err := strconv.ParseBool(val); err != nil {
				v.add("", "the istio.io/dry-run annotation must be true or false, not %s", quote(val))
			}
		}
	}
	for _, a := range []string{"internal.istio.io/webhook-always-reject", "internal.istio.io/parent-namespace", "internal.istio.io/parents"} {
		if _, ok := o.Annotations[a]; ok {
			v.add("", "the %s annotation is reserved for Istio", a)
		}
	}
}
