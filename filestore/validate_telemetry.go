package filestore

import (
	"fmt"
	"maps"
	"slices"

	"github.com/google/cel-go/cel"
	telemetry "istio.io/api/telemetry/v1alpha1"
)

// validateTelemetry is Istio's ValidateTelemetry: one of selector,
// targetRef and targetRefs; every provider named; a sampling percentage in
// [0, 100]; custom tags with a name and a value; tag overrides whose value
// goes with their operation; access log filters that parse as CEL.
func validateTelemetry(v *validator, t *telemetry.Telemetry) {
	checkPolicyTarget(v, t.Selector, t.TargetRef, t.TargetRefs)
	for i, m := range t.Metrics {
		if m == nil {
			continue
		}
		path := at("metrics", i)
		checkProviders(v, path, m.Providers)
		for j, o := range m.Overrides {
			opath := at(path+".overrides", j)
			if o == nil {
				v.add(opath, "tagOverrides may not be null")
				continue
			}
			for _, name := range slices.Sorted(maps.Keys(o.TagOverrides)) {
				to := o.TagOverrides[name]
				tpath := opath + ".tagOverrides." + name
				if to == nil {
					v.add(tpath, "tagOverrides may not be null")
					continue
				}
				switch to.Operation {
				case telemetry.MetricsOverrides_TagOverride_UPSERT:
					if to.Value == "" {
						v.add(tpath+".value", "tagOverrides.value must be set when operation is UPSERT")
					}
				case telemetry.MetricsOverrides_TagOverride_REMOVE:
					if to.Value != "" {
						v.add(tpath+".value", "tagOverrides.value may only be set when operation is UPSERT")
					}
				}
			}
			if cm, ok := o.GetMatch().GetMetricMatch().(*telemetry.MetricSelector_CustomMetric); ok && cm.CustomMetric == "" {
				v.add(opath+".match.customMetric", "customMetric may not be empty")
			}
		}
	}
	for i, tr := range t.Tracing {
		if tr == nil {
			continue
		}
		path := at("tracing", i)
		checkProviders(v, path, tr.Providers)
		if p := tr.RandomSamplingPercentage.GetValue(); p < 0 || p > 100 {
			v.add(path+".randomSamplingPercentage", "randomSamplingPercentage must be in range [0.0, 100.0]")
		}
		for _, name := range slices.Sorted(maps.Keys(tr.CustomTags)) {
			tag := tr.CustomTags[name]
			tpath := path + ".customTags." + name
			if name == "" {
				v.add(tpath, "tag name may not be empty")
			}
			if tag == nil {
				v.add(tpath, "tag '%s' may not have a nil value", name)
				continue
			}
			switch c := tag.Type.(type) {
			case *telemetry.Tracing_CustomTag_Literal:
				if c.Literal.GetValue() == "" {
					v.add(tpath+".literal.value", "literal tag value may not be empty")
				}
			case *telemetry.Tracing_CustomTag_Header:
				if c.Header.GetName() == "" {
					v.add(tpath+".header.name", "header tag name may not be empty")
				}
			case *telemetry.Tracing_CustomTag_Environment:
				if c.Environment.GetName() == "" {
					v.add(tpath+".environment.name", "environment tag name may not be empty")
				}
			}
		}
	}
	for i, l := range t.AccessLogging {
		if l == nil {
			continue
		}
		path := at("accessLogging", i)
		if l.Filter != nil {
			if err := checkCEL(l.Filter.Expression); err != nil {
				v.add(path+".filter.expression", "must be a valid CEL expression, %v", err)
			}
		}
		checkProviders(v, path, l.Providers)
	}
}

// checkProviders is Istio's validateTelemetryProviders: every provider
// reference has a name.
func checkProviders(v *validator, path string, ps []*telemetry.ProviderRef) {
	for j, p := range ps {
		if p.GetName() == "" {
			v.add(at(path+".providers", j)+".name", "providers.name may not be empty")
			return
		}
	}
}

// checkCEL parses an access log filter as Istio does (a parse in an empty
// environment: names are not checked, Envoy resolves them).
func checkCEL(expr string) error {
	env, err := cel.NewEnv()
	if err != nil {
		return fmt.Errorf("cel environment: %w", err)
	}
	if _, iss := env.Parse(expr); iss.Err() != nil {
		return iss.Err()
	}
	return nil
}
