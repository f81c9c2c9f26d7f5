mod children;
mod fake_server;
mod inbox;
mod resume;
mod support;
mod team;
mod team_cases;
mod turns;
