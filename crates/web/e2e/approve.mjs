// Answers an approval request in the troupe web panel, in the system's headless Chromium, as a
// person does: opens PANEL_URL (the URL troupe web printed, with its token) at #SESSION_ID,
// waits for the request REQUEST_ID to be shown (member, command, justification), clicks its
// Approve button, and waits until the panel says it is approved and the request is gone.
// Before that, the same page without its token must refuse to answer (the note says why).
// Saves SCREENSHOT (the request on screen). Env: PANEL_URL, SESSION_ID, REQUEST_ID,
// SCREENSHOT, CHROMIUM (default /usr/bin/chromium), TIMEOUT_MS (default 60000). Prints one
// JSON line of what it saw; exit 1 on failure.
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
const session = env("SESSION_ID");
const request = env("REQUEST_ID");
const screenshot = env("SCREENSHOT");
const timeout = Number(env("TIMEOUT_MS", "60000"));

const profile = mkdtempSync(join(tmpdir(), "troupe-e2e-"));
const problems = [];
const seen = {};
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
    // The refused answer below logs its 403 (nothing else may).
    if (message.type() === "error" && !message.text().includes("403")) problems.push(`console error: ${message.text()}`);
  });
  page.on("pageerror", (error) => problems.push(`page error: ${error.message}`));
  const card = `[data-approval="${request}"]`;

  // Without the token: shown, but not answerable.
  const bare = new URL(url);
  bare.search = "";
  await page.goto(`${bare}#${session}`);
  await page.waitForSelector(card, { timeout });
  await page.click(`${card} button[data-decision="approve"]`);
  await page.waitForFunction(() => {
    const note = document.getElementById("approval-note");
    return note && !note.hidden && note.textContent.includes("token");
  }, null, { timeout });
  seen.withoutToken = await page.textContent("#approval-note");

  // With it: the click answers.
  await page.goto(`${url}#${session}`);
  await page.waitForSelector(card, { timeout });
  seen.card = await page.textContent(card);
  await page.screenshot({ path: screenshot, fullPage: true });
  await page.click(`${card} button[data-decision="approve"]`);
  await page.waitForFunction((selector) => {
    const note = document.getElementById("approval-note");
    return !document.querySelector(selector) && note && note.textContent.startsWith("Approved");
  }, card, { timeout });
  seen.note = await page.textContent("#approval-note");
  const error = await page.evaluate(() => {
    const banner = document.getElementById("error");
    return banner && !banner.hidden ? banner.textContent : null;
  });
  if (error) problems.push(`the panel shows an error: ${error}`);
} catch (error) {
  problems.push(String(error && error.stack ? error.stack : error));
} finally {
  if (browser) await browser.close();
  rmSync(profile, { recursive: true, force: true });
}
console.log(JSON.stringify({ seen, problems }));
process.exit(problems.length ? 1 : 0);
