//! Call counts that include the compiler's clones of a function.

use crate::report::Report;

impl Report {
    /// Calls of the function named `name` and of its clones made by the
    /// compiler (`name.part.0`, `name.constprop.0`, ...), over all modules.
    pub fn calls_with_clones(&self, name: &str) -> u64 {
        self.functions
            .iter()
            .filter(|f| f.name.split('.').next() == Some(name))
            .map(|f| f.calls)
            .sum()
    }
}
