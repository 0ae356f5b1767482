//! Packets to and from bytes (etherparse). Only the edges of nfsim use this module.
