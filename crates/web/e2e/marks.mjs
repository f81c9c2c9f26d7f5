// Opens the troupe web panel on one Team in the system's headless Chromium and reports what a
// person sees, as one JSON line: the session picker's options, each task's icon, state and
// warnings (whether it is marked stalled, and why; whether it is marked for a write
// conflict), the write-conflict banner's lines, the Lead's model line (with how many
// line-break chances it has) and the Ledger table's rows (cell texts).
// Env: PANEL_URL, SESSION_ID, CHROMIUM (default /usr/bin/chromium), SCREENSHOT (optional: a PNG
// of the page is saved there). Exit 1 on a driver error.
import { chromium } from "playwright-core";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

const url = process.env.PANEL_URL;
const session = process.env.SESSION_ID;
const profile = mkdtempSync(join(tmpdir(), "troupe-e2e-"));
let browser;
let report = { problems: [] };
try {
  browser = await chromium.launchPersistentContext(profile, {
    executablePath: process.env.CHROMIUM || "/usr/bin/chromium",
    headless: true,
    args: ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
      "--disable-background-networking", "--disable-component-update", "--disable-sync"],
    viewport: { width: 1280, height: 860 },
  });
  const page = browser.pages()[0] ?? (await browser.newPage());
  page.on("pageerror", (error) => report.problems.push(`page error: ${error.message}`));
  await page.goto(`${url}#${session}`);
  await page.waitForSelector(".task", { timeout: 20000 });
  await page.waitForFunction(() => document.querySelectorAll("#session-select option").length >= 2, null, { timeout: 20000 });
  report = {
    ...report,
    ...(await page.evaluate(() => ({
      options: [...document.querySelectorAll("#session-select option")].map((o) => o.textContent),
      tasks: [...document.querySelectorAll(".task")].map((t) => ({
        id: t.dataset.taskId,
        state: t.dataset.state,
        icon: t.querySelector(".icon").textContent,
        warns: [...t.querySelectorAll(".warn")].map((w) => w.textContent),
        stalled: t.dataset.stalled || null,
        border: getComputedStyle(t).borderLeftColor,
        conflicted: t.dataset.conflicted,
      })),
      ledger: [...document.querySelectorAll("#ledger tr")].map((tr) => [...tr.children].map((c) => c.textContent)),
      ledgerNote: document.getElementById("ledger-note").textContent,
      conflicts: (() => {
        const banner = document.getElementById("conflicts");
        return banner && !banner.hidden ? [...banner.querySelectorAll(".conflict")].map((c) => c.textContent) : [];
      })(),
      model: (() => {
        const node = document.querySelector('[data-member="lead"] .model');
        return node ? { text: node.textContent, breaks: node.querySelectorAll("wbr").length } : null;
      })(),
    }))),
  };
  if (process.env.SCREENSHOT) await page.screenshot({ path: process.env.SCREENSHOT, fullPage: true });
} catch (error) {
  report.problems.push(`driver error: ${error.message}`);
} finally {
  if (browser) await browser.close();
  rmSync(profile, { recursive: true, force: true });
}
console.log(JSON.stringify(report));
process.exit(report.problems.length ? 1 : 0);
