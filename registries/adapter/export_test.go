package adapter

// Exported for tests.
var (
	SameSpec            = sameSpec
	WorkloadEntryFields = workloadEntryFields
)
