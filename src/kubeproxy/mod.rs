//! kubeproxy (in progress).
