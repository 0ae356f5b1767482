//! Kubernetes objects (in progress).
