package model

import (
	"testing"

	networking "istio.io/api/networking/v1alpha3"

	"github.com/vmesh/vmesh/store"
)

// TestWorkloadMatchesIsLabelsMatchOfMergedLabels: the allocation-free
// matcher decides as LabelsMatch over workloadLabels does, the spec's labels
// winning over the metadata's.
func TestWorkloadMatchesIsLabelsMatchOfMergedLabels(t *testing.T) {
	labelSets := []map[string]string{nil, {}, {"app": "a"}, {"app": "b"}, {"app": "a", "v": "1"}, {"v": "2"}}
	for _, meta := range labelSets {
		for _, spec := range labelSets {
			o := &store.Object{Labels: meta}
			we := &networking.WorkloadEntry{Labels: spec}
			for _, sel := range labelSets {
				want := LabelsMatch(sel, workloadLabels(o, we))
				if got := workloadMatches(sel, o, we); got != want {
					t.Errorf("selector %v, metadata labels %v, spec labels %v: %v, want %v", sel, meta, spec, got, want)
				}
			}
		}
	}
}
