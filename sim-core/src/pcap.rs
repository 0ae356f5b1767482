//! Reading and writing pcap capture files.
