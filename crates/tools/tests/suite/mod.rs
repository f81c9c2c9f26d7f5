mod bash;
mod confinement;
mod glob_grep;
mod read;
mod registry;
mod stale;
mod support;
mod write_edit;
