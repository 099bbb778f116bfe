package stage

// SetCrashPoints makes t call f between the steps of its operations, as a
// kill could interrupt them.
func SetCrashPoints(t *Tree, f func(point string)) { t.crashed = f }
