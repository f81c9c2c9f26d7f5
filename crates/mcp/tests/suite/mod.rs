mod config;
mod servers;
mod support;
