// Drives the troupe web panel in the system's headless Chromium while a scripted Team runs in
// another process, and checks that the panel follows it live, without a reload:
//   - the task TASK_ID is seen not yet completed, then completed;
//   - the teammate TEAMMATE is seen with at least two different statuses, and with the host it
//     runs on while it is live (`host` lists the hosts seen: `local` for a run on the files);
//   - no error banner, no projection failure, no console error, no page error.
// Saves SCREENSHOT (laptop size) and SCREENSHOT with "-phone" before ".png" (phone size).
// With FOLLOW=1 (and no SESSION_ID) it opens the bare PANEL_URL as a user would, prints
// {"ready": "<hash>"} once the panel shows the home's latest Team, then waits for the panel to
// move on by itself to the Team started after that, and watches that one.
// Env: PANEL_URL, SESSION_ID (unless FOLLOW=1), TASK_ID, TEAMMATE, SCREENSHOT, CHROMIUM
// (default /usr/bin/chromium), TIMEOUT_MS (default 60000). Prints one JSON line of what it saw
// (`followed`: the session watched); exit 1 on failure.
import { chromium } from "playwright-core";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

const env = (name, fallback) => {
  const value = process.env[name] ?? fallback;
  if (value === undefined) throw new Error(`${name} is required`);
  return value;
};
const url = env("PANEL_URL");
const follow = process.env.FOLLOW === "1";
let session = follow ? null : env("SESSION_ID");
const taskId = env("TASK_ID");
const teammate = env("TEAMMATE");
const screenshot = env("SCREENSHOT");
const timeoutMs = Number(env("TIMEOUT_MS", "60000"));

const profile = mkdtempSync(join(tmpdir(), "troupe-e2e-"));
const problems = [];
const seen = { task: [], teammate: [], host: [], followed: null };
let browser;
try {
  browser = await chromium.launchPersistentContext(profile, {
    executablePath: env("CHROMIUM", "/usr/bin/chromium"),
    headless: true,
    args: ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
      "--disable-background-networking", "--disable-component-update", "--disable-sync"],
    viewport: { width: 1280, height: 860 },
  });
  const page = browser.pages()[0] ?? (await browser.newPage());
  page.on("console", (message) => {
    if (message.type() === "error") problems.push(`console error: ${message.text()}`);
  });
  page.on("pageerror", (error) => problems.push(`page error: ${error.message}`));
  let loads = 0;
  page.on("load", () => { loads += 1; });

  await page.goto(follow ? url : `${url}#${session}`);
  await page.waitForSelector(".member", { timeout: 20000 });
  await page.evaluate(() => { window.__troupeMarker = "no reload"; });
  if (follow) {
    const before = await page.evaluate(() => location.hash);
    console.log(JSON.stringify({ ready: before }));
    await page.waitForFunction((old) => location.hash && location.hash !== old, before, { timeout: 30000 });
    session = (await page.evaluate(() => location.hash)).slice(1);
  }
  seen.followed = session;

  const deadline = Date.now() + timeoutMs;
  const record = (list, value) => { if (value && list[list.length - 1] !== value) list.push(value); };
  for (;;) {
    const now = await page.evaluate(({ taskId, teammate }) => {
      const task = document.querySelector(`[data-task-id="${taskId}"]`);
      const badge = document.querySelector(`[data-member="${teammate}"] .badge`);
      const host = document.querySelector(`[data-member="${teammate}"] .host`);
      const error = document.getElementById("error");
      const failure = document.getElementById("failure");
      return {
        task: task ? task.dataset.status : null,
        teammate: badge ? badge.dataset.status : null,
        host: host ? host.dataset.host : null,
        error: error && !error.hidden ? error.textContent : null,
        failure: failure && !failure.hidden ? failure.textContent : null,
        marker: window.__troupeMarker || null,
      };
    }, { taskId, teammate });
    record(seen.task, now.task);
    record(seen.teammate, now.teammate);
    record(seen.host, now.host);
    if (now.error) problems.push(`the panel shows an error: ${now.error}`);
    if (now.failure) problems.push(`the panel shows a failure: ${now.failure}`);
    if (now.marker !== "no reload") problems.push("the page was reloaded");
    const taskDone = seen.task.length >= 2 && seen.task[seen.task.length - 1] === "completed";
    const teammateChanged = new Set(seen.teammate).size >= 2;
    const settled = now.teammate === "inactive" || now.teammate === "idle";
    if (problems.length || (taskDone && teammateChanged && settled)) break;
    if (Date.now() > deadline) {
      problems.push(`timed out: task ${taskId} went ${seen.task.join(" → ") || "unseen"}, ${teammate} went ${seen.teammate.join(" → ") || "unseen"}`);
      break;
    }
    await page.waitForTimeout(100);
  }
  if (loads !== 1) problems.push(`the page loaded ${loads} times`);
  // The teammate's conversation opens on click, without a reload.
  await page.click(`[data-member="${teammate}"]`);
  await page.waitForSelector(".items .item", { timeout: 10000 });
  await page.screenshot({ path: screenshot, fullPage: true });
  await page.setViewportSize({ width: 390, height: 844 });
  await page.screenshot({ path: screenshot.replace(/\.png$/, "-phone.png"), fullPage: true });
} catch (error) {
  problems.push(`driver error: ${error.message}`);
} finally {
  if (browser) await browser.close();
  rmSync(profile, { recursive: true, force: true });
}
console.log(JSON.stringify({ seen, problems }));
process.exit(problems.length ? 1 : 0);
